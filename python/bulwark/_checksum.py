"""bulwark's Checksum64 (src/common/checksum.cc) in pure Python.

Used where bytes are few: the 48 bytes a shard header's checksum covers,
the 16 bytes of a timeline, and verifying bulwark-train's images in tests.
Four lanes over 32-byte stripes (xxHash64's structure), little-endian.
"""

import struct

_M = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_STRIPE = struct.Struct("<4Q")
_Q = struct.Struct("<Q")


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc, v):
    acc = (acc + v * _P2) & _M
    return (_rotl(acc, 31) * _P1) & _M


def checksum64(data):
    """Checksum64 of a bytes-like object, as an int."""
    data = memoryview(data).cast("B")
    n = len(data)
    full = n - n % 32
    a, b, c, d = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5
    for w, x, y, z in _STRIPE.iter_unpack(data[:full]):
        a, b, c, d = _round(a, w), _round(b, x), _round(c, y), _round(d, z)
    tail = bytes(data[full:])
    h = (_rotl(a, 1) + _rotl(b, 7) + _rotl(c, 12) + _rotl(d, 18)) & _M
    h ^= (n * _P1) & _M
    i = 0
    while i + 8 <= len(tail):
        h = (_rotl(h ^ _round(0, _Q.unpack_from(tail, i)[0]), 27) * _P1 + _P2) & _M
        i += 8
    for byte in tail[i:]:
        h = (_rotl(h ^ ((byte * _P1) & _M), 11) * _P2) & _M
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P1) & _M
    h ^= h >> 32
    return h


def next_timeline(timeline, step):
    """The timeline a restore of `step` from `timeline` continues on
    (rank_client::NextTimeline): Checksum64 of the two as little-endian u64s."""
    return checksum64(struct.pack("<QQ", timeline & _M, step & _M))
