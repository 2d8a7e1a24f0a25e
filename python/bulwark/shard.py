"""The shard image and region formats of src/rank_client/, in Python.

A shard image is one rank's training state at one step, self-describing and
self-checking (src/rank_client/shard_image.h):

    header   56 bytes: magic "BWSHARD1", u32 version (1), u32 checksum kind,
             i64 step, i32 rank, i32 world size, u64 payload length,
             u64 payload checksum, u64 header checksum (of the 48 bytes before)
    payload  u64 meta length, meta (JSON), u64 section count, per section
             u64 name length, name, u64 size; then the sections' bytes

The header checksum is always bulwark's Checksum64 (the agent reads headers
to see what it holds, and 48 bytes cost nothing in Python). The payload
checksum kind is 1 for CRC-32 (zlib's), which this client writes, 2 for
XXH3-64, which bulwark-train writes, and 0 for Checksum64, which
bulwark-train wrote before it switched to XXH3. Checksum64 is a sequential
64-bit recurrence that pure Python computes at about 10 MB/s, zlib.crc32
runs in C at GB/s. XXH3 needs the `xxhash` module (Debian python3-xxhash,
or pip's xxhash), which only reading bulwark-train's images requires: this
client's own images never need it. All detect torn writes and bit rot,
none tampering.

The header checksum is written last, so an image whose writer died midway
is never taken for complete. A region (src/rank_client/shard_region.h) is a memfd
of a 4 KiB header (magic "BWREGN01", u64 slot capacity, u64 slots) and then
the slots, each holding one image; the agent keeps the descriptor, so the
images outlive the rank that wrote them.
"""

import mmap
import os
import struct
import zlib

from ._checksum import checksum64

__all__ = ["ShardInfo", "image_size", "write_image", "peek_header", "read_image", "Region",
           "durable_path", "durable_steps", "CHECKSUM64", "CRC32", "XXH3"]

MAGIC = b"BWSHARD1"
VERSION = 1
CHECKSUM64, CRC32, XXH3 = 0, 1, 2
_HEADER = struct.Struct("<8sIIqiiQQ")   # everything before the header checksum
_U64 = struct.Struct("<Q")
HEADER_BYTES = _HEADER.size + 8         # 56, as static_assert'ed in shard_image.h
assert HEADER_BYTES == 56

REGION_MAGIC = b"BWREGN01"
_REGION = struct.Struct("<8sQQ")
REGION_HEADER_BYTES = 4096
PAGE = 4096


class ShardInfo:
    __slots__ = ("step", "rank", "world_size")

    def __init__(self, step, rank, world_size):
        self.step, self.rank, self.world_size = int(step), int(rank), int(world_size)

    def __repr__(self):
        return "ShardInfo(step=%d, rank=%d, world_size=%d)" % (self.step, self.rank, self.world_size)


def _table(meta, sections):
    """The payload's bytes before the sections' contents."""
    parts = [_U64.pack(len(meta)), meta, _U64.pack(len(sections))]
    for name, data in sections:
        n = name.encode()
        parts += [_U64.pack(len(n)), n, _U64.pack(len(data))]
    return b"".join(parts)


def image_size(meta, sections):
    """Bytes an image of `sections` ((name, bytes-like) pairs) with `meta` needs."""
    return HEADER_BYTES + len(_table(meta, sections)) + sum(len(d) for _, d in sections)


def write_image(buf, offset, capacity, info, meta, sections):
    """Writes a complete image into the writable buffer `buf` at `offset`:
    unseals the old header first, writes and checksums the payload, and seals
    the header last. `meta` is bytes (JSON); sections are (name, bytes-like)."""
    table = _table(meta, sections)
    need = HEADER_BYTES + len(table) + sum(len(d) for _, d in sections)
    if need > capacity:
        raise ValueError("shard image of %d bytes does not fit its slot of %d" % (need, capacity))
    view = memoryview(buf)
    # A reader must never see the old header over a half-new payload.
    view[offset + _HEADER.size:offset + HEADER_BYTES] = bytes(8)
    at = offset + HEADER_BYTES
    view[at:at + len(table)] = table
    crc = zlib.crc32(table)
    at += len(table)
    for _, data in sections:
        data = memoryview(data).cast("B")
        view[at:at + len(data)] = data
        crc = zlib.crc32(data, crc)
        at += len(data)
    head = _HEADER.pack(MAGIC, VERSION, CRC32, info.step, info.rank, info.world_size, need - HEADER_BYTES, crc)
    view[offset:offset + _HEADER.size] = head
    view[offset + _HEADER.size:offset + HEADER_BYTES] = _U64.pack(checksum64(head))


def peek_header(buf, offset=0, available=None):
    """(ShardInfo, image bytes, checksum kind, payload checksum) of the sealed
    image at `offset`, or None (torn, never written, damaged header)."""
    if available is None:
        available = len(buf) - offset
    if available < HEADER_BYTES:
        return None
    raw = bytes(memoryview(buf)[offset:offset + HEADER_BYTES])
    magic, version, kind, step, rank, world, payload, psum = _HEADER.unpack_from(raw)
    (hsum,) = _U64.unpack_from(raw, _HEADER.size)
    if magic != MAGIC or version != VERSION or hsum == 0 or hsum != checksum64(raw[:_HEADER.size]):
        return None
    if payload > available - HEADER_BYTES:
        return None
    return ShardInfo(step, rank, world), HEADER_BYTES + payload, kind, psum


class CorruptShard(Exception):
    """A copy that fails its checksums or whose layout is inconsistent."""


def _xxh3_64(payload, where):
    try:
        import xxhash
    except ImportError:
        # Not corrupt, but unverifiable here: refuse it the same way, saying why.
        raise CorruptShard("%s: checksum kind 2 (XXH3) needs the xxhash module "
                           "(apt install python3-xxhash, or pip install xxhash)" % where) from None
    return xxhash.xxh3_64_intdigest(payload)


def read_image(buf, offset=0, available=None, where="shard"):
    """Verifies the image at `offset` and returns (ShardInfo, meta bytes,
    {name: memoryview}). The views point into `buf`. Raises CorruptShard
    naming `where`."""
    peek = peek_header(buf, offset, available)
    if peek is None:
        raise CorruptShard("%s: no complete shard (torn, never written, or its header is damaged)" % where)
    info, total, kind, psum = peek
    payload = memoryview(buf)[offset + HEADER_BYTES:offset + total]
    if kind == CRC32:
        ok = zlib.crc32(payload) == psum
    elif kind == XXH3:
        ok = _xxh3_64(payload, where) == psum
    elif kind == CHECKSUM64:
        ok = checksum64(payload) == psum   # older bulwark-train images: slow in Python, correct
    else:
        raise CorruptShard("%s: unknown payload checksum kind %d" % (where, kind))
    if not ok:
        raise CorruptShard("%s: shard of step %d fails its checksum" % (where, info.step))
    at = 0

    def take(n):
        nonlocal at
        if len(payload) - at < n:
            raise CorruptShard("%s: truncated payload" % where)
        v = payload[at:at + n]
        at += n
        return v

    meta = bytes(take(_U64.unpack(take(8))[0]))
    count = _U64.unpack(take(8))[0]
    table = []
    for _ in range(count):
        name = bytes(take(_U64.unpack(take(8))[0])).decode()
        table.append((name, _U64.unpack(take(8))[0]))
    sections = {name: take(size) for name, size in table}
    return info, meta, sections


class Region:
    """A shard region: created here (a slot per image it keeps) and handed to the
    agent, or received from the agent (a copy it offers for a restore)."""

    def __init__(self, fd, mm, slot_capacity, slots):
        self.fd, self.mm, self.slot_capacity, self.slots = fd, mm, slot_capacity, slots

    @classmethod
    def create(cls, name, slot_capacity, slots):
        slot_capacity = (slot_capacity + PAGE - 1) // PAGE * PAGE   # page-aligned images
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, REGION_HEADER_BYTES + slot_capacity * slots)
            os.pwrite(fd, _REGION.pack(REGION_MAGIC, slot_capacity, slots), 0)
        except OSError:
            os.close(fd)
            raise
        return cls.map(fd)

    @classmethod
    def map(cls, fd):
        """Maps a region; takes ownership of `fd`."""
        try:
            size = os.fstat(fd).st_size
            head = os.pread(fd, _REGION.size, 0)
            if size < REGION_HEADER_BYTES or len(head) != _REGION.size:
                raise CorruptShard("a shard region without its header")
            magic, capacity, slots = _REGION.unpack(head)
            if magic != REGION_MAGIC or REGION_HEADER_BYTES + capacity * slots > size:
                raise CorruptShard("a shard region whose header does not match its size")
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except Exception:
            os.close(fd)
            raise
        return cls(fd, mm, capacity, slots)

    def offset(self, slot):
        return REGION_HEADER_BYTES + slot * self.slot_capacity

    def sealed(self):
        """[(slot, ShardInfo, bytes)] of the slots holding a sealed image,
        newest step first (headers only)."""
        out = []
        for s in range(self.slots):
            p = peek_header(self.mm, self.offset(s), self.slot_capacity)
            if p is not None:
                out.append((s, p[0], p[1]))
        out.sort(key=lambda x: -x[1].step)
        return out

    def close(self):
        try:
            self.mm.close()
        except BufferError:
            pass   # views into it are still alive; the mapping goes with them
        os.close(self.fd)


def durable_path(directory, step, rank):
    """Where the agent persists a copy: DIR/step-00000100/rank-3.shard."""
    return os.path.join(directory, "step-%08d" % step, "rank-%d.shard" % rank)


def durable_steps(directory, rank):
    """The steps with a durable copy of `rank` under `directory`, newest first."""
    steps = []
    try:
        names = os.listdir(directory)
    except OSError:
        return steps
    for e in names:
        if e.startswith("step-") and e[5:].isdigit() and os.path.exists(durable_path(directory, int(e[5:]), rank)):
            steps.append(int(e[5:]))
    return sorted(steps, reverse=True)
