"""Every-step in-memory checkpoints of a PyTorch job, the rank's side.

The same protocol and shard format as bulwark-train (src/rank_client/), so the
agent keeps a Python job's state exactly as it keeps the trainer's: in its
machine's memory, pushed to a backup peer on another machine, persisted
every `persist_every` steps (docs/checkpoints.md).

    state = bulwark.restore()            # collective; None on a first start
    if state is not None:
        model.load_state_dict(state.state["model"])
        opt.load_state_dict(state.state["optimizer"])
        start = state.step + 1
    for step in range(start, steps):
        ... forward, backward, opt.step() ...
        bulwark.save(step, {"model": model.state_dict(), "optimizer": opt.state_dict()})

What a rank saves is its whole `state` (torch.save bytes) plus its RNG
states (torch, CUDA's, Python's random, numpy's if loaded); restore() puts
the RNG states back. Under DDP every rank saves the full replicated state:
simpler than bulwark-train's 1/W slices, at W times the memory.

Loading is torch.load(weights_only=True): tensors, plain Python values
and the containers a state_dict uses, no code. The client's own part of
the image (the RNG states) is stored as such values, numpy's included, so
nothing of it needs allowing. A state holding other objects is refused
with the fix named: restore(safe_globals=[MyClass]) allows those classes
(torch >= 2.5), restore(weights_only=False) loads anything, for a job that
trusts its own checkpoints (the agents' copies are authenticated between
machines, a durable directory is only as safe as its permissions). Before
torch 2.4 the safe loader cannot read an optimizer's state (torch 1.13
refuses floats): there the state loads as that torch's default does,
weights_only=False, with a note.

CUDA tensors in a state are copied to pinned host buffers on save, all
enqueued at once and waited for once (torch.save alone copies each
storage synchronously), and are tagged with the device they came from.
restore() loads every tensor onto the CPU by default (load_state_dict then
copies into the model's own tensors wherever they live);
restore(map_location=None) puts each back on its saved device, and any
other map_location is torch.load's.

The collectives of restore() run on a device the default group's backend
serves: the CPU for Gloo (and a mixed "cpu:gloo,cuda:nccl" group), this
rank's current CUDA device for an NCCL-only group (collective_device_type).

Each rank always writes its own image and the agent pushes a copy to the
backup peer. bulwark-train lets a peer write that backup from its own
memory instead (PEERWRITES); a Python job's ranks usually draw from
different RNG streams, so a peer's state is not this rank's.

Rank <-> agent: a Unix SOCK_SEQPACKET socket named in BULWARK_SHARD_SOCKET
(src/rank_client/shard_socket.h):
    RESTORE <rank> <world>            -> COPY <source> (+fd) ... DURABLE <dir> END
    REGION <rank> <world> (+memfd)    -> OK | ERROR <why>
    SAVED <slot> <step>               -> RELEASED <slot> (sent and persisted)
The socket is local to the machine and the agent set its path for this
process; it carries no authentication (only agent-to-agent links do).
"""

import array
import collections
import io
import json
import os
import socket
import sys
import time

from . import shard
from ._checksum import next_timeline
from ._serialize import HostStaging, load, rng_state, set_rng_state

__all__ = ["MemoryCheckpoint", "Restored", "SHARD_SOCKET_ENV", "collective_device_type"]

SHARD_SOCKET_ENV = "BULWARK_SHARD_SOCKET"
_RELEASE_TIMEOUT_S = 60    # a slot held longer means the agent is stuck
_COPIES_TIMEOUT_S = 60     # the agent answers RESTORE once its fetches from peers end
_MAX_CANDIDATES = 16       # distinct points one rank offers to the agreement
# Images a rank keeps in its region. Two are not enough for a dead machine:
# a survivor may have sealed step k+1 while the dead rank had sealed only
# k (it died between the collective of k+1 and its save), and the push of k
# had not finished, so the peer holds k-1. The survivor must still hold k-1:
# k+1, k and k-1 are three. (A full suite here, with two: the survivor held
# 131 and 130, the peer 129 and 128, and the restore went to durable
# storage, 11 steps back.)
_SLOTS = 3
_SOURCES = ("memory", "peer", "durable")

Restored = collections.namedtuple("Restored", "step state source newest_step ms")
Restored.__doc__ = """What restore() returns: the agreed step and the `state` saved
with it; `source` is the slowest kind any rank used (memory < peer <
durable), `newest_step` the newest step any copy on that timeline held
(newest_step - step: the steps the fault cost), `ms` the slowest rank's
restore time."""


def _source_kind(source):
    if source == "memory":
        return 0
    return 1 if source.startswith("peer") else 2


def newest_common_point(held):
    """rank_client::NewestCommonPoint: the newest (step, timeline) every rank
    holds (held[r]: rank r's points), or None; and the newest step any rank
    holds on that point's timeline."""
    if not held:
        return None, -1
    common = set(held[0])
    for h in held[1:]:
        common &= set(h)
    if not common:
        return None, -1
    best = max(common)
    newest = max(s for h in held for s, t in h if t == best[1])
    return best, newest


class _Copy:
    """One copy of this rank's shard that a restore may use."""

    def __init__(self, source, info, region=None, slot=-1, path=None):
        self.source, self.info, self.region, self.slot, self.path = source, info, region, slot, path

    def open(self, where):
        if self.region is not None:
            r = self.region
            return shard.read_image(r.mm, r.offset(self.slot), r.slot_capacity, where)
        with open(self.path, "rb") as f:
            data = f.read()
        return shard.read_image(data, 0, len(data), where)


class MemoryCheckpoint:
    """One rank's connection to its agent's shard store."""

    def __init__(self, path, rank, world_size, note=None):
        self.rank, self.world_size = rank, world_size
        self._note = note or (lambda s: sys.stderr.write("bulwark: %s\n" % s))
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._sock.connect(path)
        except OSError:
            self._sock.close()
            raise
        self._region = None
        self._in_agent = set()   # slots announced SAVED and not yet RELEASED
        self._next = 0
        self.timeline = 0        # 0: the run that started from step 0
        self.blocked_ms = 0.0    # time save() waited for the agent to release a slot
        self.save_ms = 0.0       # time save() took in all, serializing included
        self._staging = HostStaging()

    # --- the socket ---------------------------------------------------------

    def _send(self, text, fd=None):
        if fd is None:
            self._sock.sendmsg([text.encode()])
        else:
            self._sock.sendmsg([text.encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])

    def _recv(self, timeout_s):
        """(words, fd or None); raises TimeoutError, or ConnectionError when
        the agent closed the socket."""
        self._sock.settimeout(timeout_s)
        try:
            msg, fds, _, _ = socket.recv_fds(self._sock, 4096, 1)
        except socket.timeout:
            raise TimeoutError("no answer from the agent's shard socket within %g s" % timeout_s)
        if not msg:
            raise ConnectionError("the agent closed the shard socket")
        words = msg.decode(errors="replace").split()
        if len(words) == 2 and words[0] == "RELEASED":
            self._in_agent.discard(int(words[1]))
        return words, (fds[0] if fds else None)

    # --- saving -------------------------------------------------------------

    def _wait_released(self, slots):
        t = time.monotonic()
        deadline = t + _RELEASE_TIMEOUT_S
        while self._in_agent & set(slots):
            left = deadline - time.monotonic()
            if left <= 0:
                left = 0.001   # one last look; _recv's timeout says it
            try:
                _, fd = self._recv(left)
            except TimeoutError:
                raise TimeoutError("the agent has held shard slot(s) %s for %g s (stuck sending or persisting)"
                                   % (sorted(self._in_agent), _RELEASE_TIMEOUT_S)) from None
            if fd is not None:
                os.close(fd)
        self.blocked_ms += (time.monotonic() - t) * 1000.0

    def _open_region(self, image_bytes):
        """A new region for images of about `image_bytes`, handed to the agent.
        Headroom: a state's pickle grows a little (optimizer state appears
        after the first step, ints get longer)."""
        self._wait_released(range(_SLOTS))   # slot numbers of the old region must not be confused
        capacity = image_bytes + image_bytes // 4 + (64 << 10)
        region = shard.Region.create("bulwark-shard-rank-%d" % self.rank, capacity, _SLOTS)
        self._send("REGION %d %d" % (self.rank, self.world_size), region.fd)
        while True:
            words, fd = self._recv(10)
            if fd is not None:
                os.close(fd)
            if words and words[0] == "OK":
                break
            if words and words[0] == "ERROR":
                region.close()
                raise RuntimeError("the agent refused the shard region: " + " ".join(words[1:]))
        if self._region is not None:
            self._region.close()   # the agent keeps its own mapping until this one holds an image
        self._region, self._next = region, 0

    def save(self, step, state):
        """Checkpoints `state` (anything torch.save takes) as step `step`, with
        this rank's RNG states. Returns once the image is sealed in shared
        memory; the agent backs it up and persists it in the background,
        and the next save() waits until it has."""
        import torch
        t = time.monotonic()
        buf = self._staging.save(state)
        # The RNG states in a section of their own: restore() loads them on
        # the CPU whatever map_location the user's state gets.
        rng = io.BytesIO()
        torch.save(rng_state(), rng)
        meta = json.dumps({"format": "torch.save", "step": int(step), "world_size": self.world_size,
                           "rank": self.rank, "written_by": self.rank, "timeline": self.timeline}).encode()
        sections = [("state", buf.getbuffer()), ("rng", rng.getbuffer())]
        need = shard.image_size(meta, sections)
        if self._region is None or need > self._region.slot_capacity:
            self._open_region(need)
        slot = self._next
        self._drain()
        # Every slot, not only the one about to be overwritten: the agent
        # must have pushed the previous step to the backup peer before this
        # one is sealed. Then the peer holds at least the step before this
        # rank's newest, and every other rank, at most one step ahead,
        # still holds that step (_SLOTS): a dead machine costs at most two
        # steps. With only the slot's own release, pushes may fall further
        # behind (the agent skips a superseded image), the survivors' slots
        # and the peer share no step, and the restore falls back to durable
        # storage. The push had a whole step to finish, so this rarely waits.
        self._wait_released(range(_SLOTS))
        r = self._region
        shard.write_image(r.mm, r.offset(slot), r.slot_capacity, shard.ShardInfo(step, self.rank, self.world_size),
                          meta, sections)
        self._in_agent.add(slot)
        self._send("SAVED %d %d" % (slot, step))
        self._next = (slot + 1) % _SLOTS
        self.save_ms += (time.monotonic() - t) * 1000.0

    def _drain(self):
        """Reads the RELEASED messages already waiting, without blocking."""
        while True:
            try:
                self._sock.setblocking(False)
                msg, fds, _, _ = socket.recv_fds(self._sock, 4096, 1)
            except (BlockingIOError, InterruptedError):
                return
            finally:
                self._sock.setblocking(True)
            for fd in fds:
                os.close(fd)
            if not msg:
                raise ConnectionError("the agent closed the shard socket")
            words = msg.decode(errors="replace").split()
            if len(words) == 2 and words[0] == "RELEASED":
                self._in_agent.discard(int(words[1]))

    def resumed_from_disk(self, step):
        """The job resumed from a checkpoint of its own at `step`: a timeline of
        its own, as bulwark-train's disk resumes (MemoryCheckpoint::ResumedFromDisk)."""
        self.timeline = next_timeline((1 << 64) - 1, step)

    # --- restoring ----------------------------------------------------------

    def _copies(self):
        """Every copy the agent offers: memory, then peers, then durable."""
        self._send("RESTORE %d %d" % (self.rank, self.world_size))
        out, durable, regions = [], None, []
        deadline = time.monotonic() + _COPIES_TIMEOUT_S
        while True:
            words, fd = self._recv(max(0.1, deadline - time.monotonic()))
            if words and words[0] == "END":
                break
            if len(words) == 2 and words[0] == "DURABLE":
                durable = words[1]
            if len(words) != 2 or words[0] != "COPY" or fd is None:
                if fd is not None:
                    os.close(fd)
                continue
            try:
                region = shard.Region.map(fd)
            except (OSError, shard.CorruptShard) as e:
                self._note("rank %d: an unreadable region offered as %s: %s" % (self.rank, words[1], e))
                continue
            regions.append(region)
            for slot, info, _ in region.sealed():
                if info.rank == self.rank:   # the agent filters; a mixup must not restore another rank
                    out.append(_Copy(words[1], info, region=region, slot=slot))
        if durable:
            for step in shard.durable_steps(durable, self.rank):
                out.append(_Copy("durable", shard.ShardInfo(step, self.rank, self.world_size),
                                 path=shard.durable_path(durable, step, self.rank)))
        return out, regions

    def _verify(self, copies, durable):
        """The copies that pass their checksums and belong to this run, as
        [(copy, meta, sections)], and their points, newest first."""
        good, seen = [], []
        for c in copies:
            if (c.source == "durable") != durable:
                continue
            where = "rank %d's %s copy of step %d" % (self.rank, c.source, c.info.step)
            try:
                info, meta, sections = c.open(where)
                m = json.loads(meta)
                for key, ours in (("format", "torch.save"), ("world_size", self.world_size), ("rank", self.rank)):
                    if m.get(key) != ours:
                        raise shard.CorruptShard("%s has %s %r, this run has %r" % (where, key, m.get(key), ours))
                if "state" not in sections:
                    raise shard.CorruptShard(where + ": no state section")
            except (OSError, ValueError, shard.CorruptShard) as e:
                self._note("%s; trying the next copy" % e)
                continue
            good.append((c, m, sections))
            seen.append("%s:%d" % (c.source, c.info.step))
        self._note("rank %d holds %s%s" % (self.rank, " ".join(seen) or "no usable copy",
                                           " (durable storage)" if durable else ""))
        points = sorted({(m["step"], int(m.get("timeline", 0))) for _, m, _ in good}, reverse=True)
        return good, points

    def _agree(self, points):
        """Collective: newest_common_point over every rank's points."""
        import torch
        W = self.world_size
        # One row per rank of (step + 1, timeline's high and low 32 bits):
        # exact in doubles, summed into place.
        table = torch.zeros(W, _MAX_CANDIDATES, 3, dtype=torch.float64)
        for i, (step, tl) in enumerate(points[:_MAX_CANDIDATES]):
            table[self.rank, i, 0] = step + 1
            table[self.rank, i, 1] = tl >> 32
            table[self.rank, i, 2] = tl & 0xFFFFFFFF
        _all_reduce_sum(table, W)
        held = [[(int(row[0]) - 1, (int(row[1]) << 32) | int(row[2])) for row in table[r].tolist() if row[0] >= 1]
                for r in range(W)]
        return newest_common_point(held)

    def restore(self, weights_only=True, map_location="cpu", safe_globals=()):
        """Collective: every rank calls it, after torch.distributed is set up
        (if the world has more than one rank). Loads the newest step every
        rank holds, restores this rank's RNG states and returns a Restored;
        None when the ranks share no step (a first start).

        weights_only, safe_globals: how the state is unpickled (the module's
        docstring): torch.load's safe loader, with `safe_globals` (classes
        or functions) allowed besides; weights_only=False loads any object.
        map_location: where tensors land, "cpu" by default; None puts each
        on the device it was saved from; else as torch.load takes it."""
        import torch
        t0 = time.monotonic()
        copies, regions = self._copies()
        try:
            good, points = self._verify(copies, durable=False)
            point, newest = self._agree(points)
            if point is None:   # no step every rank holds in memory: durable storage
                good, points = self._verify(copies, durable=True)
                point, newest = self._agree(points)
            if point is None:
                return None
            step, timeline = point
            for c, m, sections in good:
                if (m["step"], int(m.get("timeline", 0))) == point:
                    where = "rank %d's %s copy of step %d" % (self.rank, c.source, step)
                    state = load(bytes(sections["state"]), weights_only, map_location, safe_globals, where)
                    if "rng" in sections:
                        rng = load(bytes(sections["rng"]), True, "cpu", (), where + "'s RNG states")
                    else:   # an image of a client before 2026-12: {"state": ..., "rng": ...} in one
                        state, rng = state["state"], state["rng"]
                    source = c.source
                    break
            else:   # cannot happen: the point came from this rank's own list
                raise RuntimeError("rank %d lost its copy of the agreed step %d" % (self.rank, step))
            del good, sections
        finally:
            for r in regions:
                r.close()
        set_rng_state(rng)
        self.timeline = next_timeline(timeline, step)
        ms = (time.monotonic() - t0) * 1000.0
        # Everyone learns every rank's source and time: rank 0 reports them.
        table = torch.zeros(self.world_size, 2, dtype=torch.float64)
        table[self.rank, 0] = _source_kind(source)
        table[self.rank, 1] = ms
        _all_reduce_sum(table, self.world_size)
        kinds = [int(k) for k in table[:, 0].tolist()]
        out = Restored(step, state, _SOURCES[max(kinds)], newest, max(table[:, 1].tolist()))
        self._note("restored step %d from %s in %d ms" % (step, source, ms))
        if self.rank == 0:
            # The agent reads this line from the rank's output and reports the
            # restore: the incident records the step and the source.
            print(json.dumps({"event": "restore", "step": step, "source": out.source,
                              "sources": [_SOURCES[k] for k in kinds], "newest_step": newest, "ms": round(out.ms, 1)}),
                  flush=True)
        return out

    def close(self):
        if self._region is not None:
            self._region.close()
            self._region = None
        self._sock.close()


# --- collectives ------------------------------------------------------------

# Backends that reduce only CUDA tensors, where torch's own table
# (dist.Backend.backend_capability, torch >= 2.0) does not name them: an
# all-reduce of a CPU tensor on such a group raises ("No backend type
# associated with device type cpu"). torch 2.15's "nccl" is its nccl2.
_CUDA_ONLY_BACKENDS = ("nccl", "nccl2", "nccl-legacy", "nccl-lazy")


def collective_device_type(backend, capability=None):
    """The device type ("cpu", "cuda", ...) whose tensors a group with
    `backend` (as dist.get_backend() names it) reduces: "cpu" wherever the
    group has a CPU backend, so that small tables cost no device copies.
    "gloo", "mpi", "cpu:gloo,cuda:nccl" -> "cpu"; "nccl", "nccl2",
    "cuda:nccl" -> "cuda". `capability` (backend -> device types, torch's
    dist.Backend.backend_capability) decides for backends it names."""
    b = str(backend).strip().lower()
    if ":" in b:   # a device -> backend map, e.g. "cpu:gloo,cuda:nccl"
        devices = [part.split(":", 1)[0].strip() for part in b.split(",") if ":" in part]
    elif capability and b in capability and b not in _CUDA_ONLY_BACKENDS:
        devices = list(capability[b])
    else:
        devices = ["cuda"] if b in _CUDA_ONLY_BACKENDS else ["cpu"]
    if "cpu" in devices or not devices:
        return "cpu"
    return devices[0]


def _all_reduce_sum(t, world_size):
    """Sums CPU tensor `t` over the default group, in place, on a device
    the group's backend serves."""
    if world_size <= 1:
        return
    import torch
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("bulwark.restore() in a world of %d ranks needs torch.distributed: call "
                           "init_process_group first" % world_size)
    kind = collective_device_type(dist.get_backend(), getattr(dist.Backend, "backend_capability", None))
    if kind == "cpu":
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return
    # The rank's own device: NCCL ranks have set it (torch.cuda.set_device
    # or init_process_group's device_id) before restore().
    on_device = t.to(torch.device(kind, getattr(torch, kind).current_device()))
    dist.all_reduce(on_device, op=dist.ReduceOp.SUM)
    t.copy_(on_device.cpu())
