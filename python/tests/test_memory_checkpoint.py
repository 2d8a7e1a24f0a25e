"""The Python client's in-memory checkpoints without a cluster: the shard
format against values bulwark's C++ computes, and save/restore against a
socket standing in for the agent's shard store (src/agent/shard_store.cc).
The cross-language check (C++ reading Python's images and the other way) is
python_shard_format_test in tests/; the real agent is in
python_checkpoint_cluster_test."""

import array
import collections
import io
import json
import os
import pickle
import socket
import sys
import tempfile
import threading
import unittest
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
try:
    import torch  # noqa: E402
except ImportError as e:
    raise ImportError("%s cannot import torch (%s): run scripts/install-python.sh (install-deps.sh does) and run "
                      "these tests with the clone's .venv/bin/python" % (sys.executable, e))

from bulwark import shard  # noqa: E402
from bulwark._checksum import checksum64, next_timeline  # noqa: E402
from bulwark import _serialize as ser  # noqa: E402
from bulwark import memory_checkpoint as mc  # noqa: E402
from bulwark.memory_checkpoint import MemoryCheckpoint, collective_device_type, newest_common_point  # noqa: E402

CUDA = torch.cuda.is_available()
# torch >= 2.4: a weights_only loader that reads a state_dict (_serialize.load).
SAFE_LOADER = hasattr(torch.serialization, "add_safe_globals")


class ChecksumTest(unittest.TestCase):
    def test_matches_the_cpp_checksum64(self):
        # Printed by bulwark::Checksum64 (src/common/checksum.cc).
        self.assertEqual(checksum64(b""), 0x3bfd28428f0d0d36)
        self.assertEqual(checksum64(b"abc"), 0xe9467527c216a046)
        self.assertEqual(checksum64(bytes(range(100))), 0xcd519297587db8a0)

    def test_a_timeline_changes_with_the_step_and_repeats_for_the_same_one(self):
        self.assertEqual(next_timeline(0, 12), next_timeline(0, 12))
        self.assertNotEqual(next_timeline(0, 12), next_timeline(0, 13))
        self.assertNotEqual(next_timeline(0, 12), next_timeline(next_timeline(0, 12), 12))


class FormatTest(unittest.TestCase):
    def write(self, step=7, sections=(("state", b"x" * 1000), ("rng", b"r" * 33))):
        buf = bytearray(8192)
        shard.write_image(buf, 0, len(buf), shard.ShardInfo(step, 1, 2), b'{"a":1}', list(sections))
        return buf

    def test_an_image_reads_back_with_its_sections(self):
        info, meta, sections = shard.read_image(self.write())
        self.assertEqual((info.step, info.rank, info.world_size), (7, 1, 2))
        self.assertEqual(meta, b'{"a":1}')
        self.assertEqual(bytes(sections["state"]), b"x" * 1000)
        self.assertEqual(bytes(sections["rng"]), b"r" * 33)

    def test_the_payload_is_crc32_and_the_header_checksum64(self):
        buf = self.write()
        info, total, kind, psum = shard.peek_header(buf)
        self.assertEqual(kind, shard.CRC32)
        self.assertEqual(psum, zlib.crc32(bytes(buf[56:total])))
        self.assertEqual(int.from_bytes(buf[48:56], "little"), checksum64(bytes(buf[:48])))

    def test_a_flipped_payload_bit_fails_the_checksum(self):
        buf = self.write()
        buf[600] ^= 0x10
        with self.assertRaisesRegex(shard.CorruptShard, "step 7 fails its checksum"):
            shard.read_image(buf, where="memory copy")

    def test_an_unsealed_image_is_never_complete(self):
        buf = self.write()
        buf[48:56] = bytes(8)   # what write_image does first: a writer killed midway
        self.assertIsNone(shard.peek_header(buf))
        with self.assertRaisesRegex(shard.CorruptShard, "no complete shard"):
            shard.read_image(buf)

    def test_an_image_larger_than_its_slot_is_refused(self):
        with self.assertRaisesRegex(ValueError, "does not fit its slot of 100"):
            shard.write_image(bytearray(100), 0, 100, shard.ShardInfo(1, 0, 1), b"{}", [("s", b"y" * 200)])

    def test_a_region_lists_its_sealed_slots_newest_first(self):
        r = shard.Region.create("test", 5000, 2)
        self.assertEqual(r.slot_capacity, 8192)   # page-rounded
        for slot, step in ((0, 4), (1, 5)):
            shard.write_image(r.mm, r.offset(slot), r.slot_capacity, shard.ShardInfo(step, 0, 1), b"{}", [])
        again = shard.Region.map(os.dup(r.fd))
        self.assertEqual([(s, i.step) for s, i, _ in again.sealed()], [(1, 5), (0, 4)])
        again.close()
        r.close()

    def test_the_newest_common_point_is_shared_by_every_rank(self):
        a, b = (10, 0), (11, 0)
        self.assertEqual(newest_common_point([[b, a], [a]]), (a, 11))
        # Another timeline's step 11 is not step 11 of this one.
        self.assertEqual(newest_common_point([[a, (11, 5)], [a, b]]), (a, 11))
        self.assertEqual(newest_common_point([[a], [b]]), (None, -1))


class Agent:
    """A listening shard socket that answers like the agent's store: keeps
    the regions ranks hand it, releases each SAVED slot, and offers its
    regions on RESTORE."""

    def __init__(self, durable=None):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "shards.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(self.path)
        self.listener.listen(4)
        self.durable = durable
        self.regions = []     # fds the ranks handed over
        self.saved = []       # (slot, step)
        self.release = True
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            conn, _ = self.listener.accept()
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn):
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(conn, 4096, 1)
            except OSError:
                return   # the rank went away
            if not msg:
                return
            w = msg.decode().split()
            if w[0] == "REGION":
                self.regions.append(fds[0])
                conn.sendmsg([b"OK"])
            elif w[0] == "SAVED":
                with self.changed:
                    self.saved.append((int(w[1]), int(w[2])))
                    self.changed.notify_all()
                if self.release:
                    conn.sendmsg([("RELEASED %s" % w[1]).encode()])
            elif w[0] == "RESTORE":
                for fd in self.regions:
                    conn.sendmsg([b"COPY memory"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
                if self.durable:
                    conn.sendmsg([("DURABLE " + self.durable).encode()])
                conn.sendmsg([b"END"])


    def wait_saved(self, n):
        """The SAVED messages, once `n` arrived (they are not answered)."""
        with self.changed:
            self.changed.wait_for(lambda: len(self.saved) >= n, timeout=30)
            return list(self.saved)


class SaveRestoreTest(unittest.TestCase):
    def test_a_first_start_has_nothing_to_restore(self):
        agent = Agent()
        m = MemoryCheckpoint(agent.path, 0, 1, note=lambda s: None)
        self.assertIsNone(m.restore())

    def test_saves_rotate_through_three_slots_and_restore_returns_the_newest_with_the_rng(self):
        agent = Agent()
        m = MemoryCheckpoint(agent.path, 0, 1, note=lambda s: None)
        torch.manual_seed(3)
        for step in (1, 2, 3):
            m.save(step, {"w": torch.full((4,), float(step)), "step": step})
        self.assertEqual(agent.wait_saved(3), [(0, 1), (1, 2), (2, 3)])
        expected_draw = torch.rand(3)   # what the RNG gives right after step 3
        torch.rand(100)                 # the job went on drawing before the fault
        m = MemoryCheckpoint(agent.path, 0, 1, note=lambda s: None)   # the rank restarted
        got = m.restore()
        self.assertEqual(got.step, 3)
        self.assertEqual(got.source, "memory")
        self.assertEqual(got.newest_step, 3)
        self.assertTrue(torch.equal(got.state["w"], torch.full((4,), 3.0)))
        self.assertTrue(torch.equal(torch.rand(3), expected_draw), "the RNG state of step 3 was not restored")
        # The restore starts a new timeline: later saves never mix with the old one.
        m.save(4, {"w": torch.zeros(4)})
        info, meta, _ = shard.read_image(m._region.mm, m._region.offset(0), m._region.slot_capacity)
        self.assertEqual(json.loads(meta)["timeline"], next_timeline(0, 3))

    def test_a_survivor_one_step_ahead_still_holds_the_step_a_lagging_peer_holds(self):
        # The dead rank sealed k = 3 but its push of 3 did not finish: the
        # peer holds 2 and 1. This rank sealed k + 1 = 4 and must hold 2.
        agent = Agent()
        m = MemoryCheckpoint(agent.path, 0, 2, note=lambda s: None)
        for step in (1, 2, 3, 4):
            m.save(step, {"v": step})
        agent.wait_saved(4)
        mine = [info.step for _, info, _ in m._region.sealed()]
        self.assertEqual(mine, [4, 3, 2])
        point, _ = newest_common_point([[(s, 0) for s in mine], [(2, 0), (1, 0)]])
        self.assertEqual(point, (2, 0))

    def test_a_corrupt_newest_copy_falls_back_to_the_previous_step(self):
        agent = Agent()
        notes = []
        m = MemoryCheckpoint(agent.path, 0, 1, note=notes.append)
        m.save(1, {"v": 1})
        m.save(2, {"v": 2})
        r = m._region
        r.mm[r.offset(1) + 200] ^= 0x10   # step 2 lives in slot 1
        got = m.restore()
        self.assertEqual((got.step, got.state["v"]), (1, 1))
        self.assertTrue(any("step 2 fails its checksum" in n for n in notes), notes)

    def test_a_save_waits_until_the_agent_has_backed_up_the_previous_step(self):
        # Otherwise backups could fall two steps behind and a dead machine
        # would cost more than one step.
        agent = Agent()
        agent.release = False
        m = MemoryCheckpoint(agent.path, 0, 1, note=lambda s: None)
        m.save(1, {"v": 1})
        import bulwark.memory_checkpoint as mc
        old, mc._RELEASE_TIMEOUT_S = mc._RELEASE_TIMEOUT_S, 0.5
        try:
            with self.assertRaisesRegex(TimeoutError, r"has held shard slot\(s\) \[0\]"):
                m.save(2, {"v": 2})
        finally:
            mc._RELEASE_TIMEOUT_S = old
        self.assertEqual(agent.wait_saved(1), [(0, 1)])

    def test_a_growing_state_gets_a_larger_region(self):
        agent = Agent()
        m = MemoryCheckpoint(agent.path, 0, 1, note=lambda s: None)
        m.save(1, {"v": b"a" * 1000})
        m.save(2, {"v": b"b" * 1_000_000})
        self.assertEqual(len(agent.regions), 2)
        self.assertEqual(m.restore().state["v"], b"b" * 1_000_000)

    def test_durable_copies_serve_when_memory_holds_none(self):
        durable = tempfile.mkdtemp()
        # What the agent persists: the image's bytes, named by step and rank.
        src = Agent()
        w = MemoryCheckpoint(src.path, 0, 1, note=lambda s: None)
        w.save(20, {"v": 20})
        r = w._region
        path = shard.durable_path(durable, 20, 0)
        os.makedirs(os.path.dirname(path))
        with open(path, "wb") as f:
            f.write(r.mm[r.offset(0):r.offset(0) + shard.peek_header(r.mm, r.offset(0))[1]])
        agent = Agent(durable=durable)
        m = MemoryCheckpoint(agent.path, 0, 1, note=lambda s: None)
        got = m.restore()
        self.assertEqual((got.step, got.source, got.state["v"]), (20, "durable", 20))


class Opaque:
    """An object of the user's own, which torch.load(weights_only=True) refuses."""

    def __init__(self, n):
        self.n = n


class WeightsOnlyTest(unittest.TestCase):
    """restore() loads with torch.load(weights_only=True): the client's own
    part of the image needs nothing allowed, the user chooses for the rest."""

    def saved(self, state):
        agent = Agent()
        m = MemoryCheckpoint(agent.path, 0, 1, note=lambda s: None)
        m.save(1, state)
        return m

    def test_numpys_rng_state_is_saved_as_plain_values_and_comes_back(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("no numpy in this python")
        np.random.seed(5)
        np.random.rand(3)
        m = self.saved({"v": 1})
        expected = np.random.rand(4)
        np.random.rand(50)   # the job drew on before the fault
        got = m.restore()
        self.assertEqual(got.state, {"v": 1})
        self.assertTrue(np.array_equal(np.random.rand(4), expected), "numpy's RNG state was not restored")
        # The image as stored: no ndarray, so weights_only needs no numpy globals.
        r = m._region
        _, _, sections = shard.read_image(r.mm, r.offset(0), r.slot_capacity)
        rng = torch.load(io.BytesIO(bytes(sections["rng"])), weights_only=SAFE_LOADER)
        self.assertEqual(type(rng["numpy"][1]), list)

    @unittest.skipUnless(SAFE_LOADER, "torch %s has no usable weights_only loader" % torch.__version__)
    def test_an_object_of_the_users_is_refused_naming_the_fix_and_can_be_allowed(self):
        m = self.saved({"obj": Opaque(7), "w": torch.ones(2)})
        with self.assertRaisesRegex(pickle.UnpicklingError,
                                    r"rank 0's memory copy of step 1 holds an object .*Opaque.*weights_only=False"):
            m.restore()
        self.assertEqual(m.restore(weights_only=False).state["obj"].n, 7)
        if hasattr(torch.serialization, "safe_globals"):   # torch >= 2.5
            self.assertEqual(m.restore(safe_globals=[Opaque]).state["obj"].n, 7)

    def test_an_image_of_an_older_client_with_numpys_array_restores_with_weights_only_false(self):
        # Before 2026-12 the client pickled numpy's RNG state as an ndarray,
        # in the state's section: weights_only refuses it, naming the way out.
        try:
            import numpy as np
        except ImportError:
            self.skipTest("no numpy in this python")
        import random
        agent = Agent()
        m = MemoryCheckpoint(agent.path, 0, 1, note=lambda s: None)
        np.random.seed(9)
        old_rng = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
        buf = io.BytesIO()
        torch.save({"state": {"v": 3}, "rng": old_rng}, buf)
        meta = json.dumps({"format": "torch.save", "step": 3, "world_size": 1, "rank": 0, "written_by": 0,
                           "timeline": 0}).encode()
        sections = [("state", buf.getbuffer())]
        m._open_region(shard.image_size(meta, sections))
        r = m._region
        shard.write_image(r.mm, r.offset(0), r.slot_capacity, shard.ShardInfo(3, 0, 1), meta, sections)
        expected = np.random.rand(2)
        if SAFE_LOADER:
            with self.assertRaisesRegex(pickle.UnpicklingError, "weights_only=False"):
                m.restore()
        got = m.restore(weights_only=False)
        self.assertEqual((got.step, got.state), (3, {"v": 3}))
        self.assertTrue(np.array_equal(np.random.rand(2), expected))

    def test_tensors_land_where_map_location_says(self):
        m = self.saved({"w": torch.arange(3.0)})
        self.assertEqual(m.restore().state["w"].device.type, "cpu")
        self.assertEqual(m.restore(map_location=None).state["w"].device.type, "cpu")   # where it was saved from
        self.assertEqual(m.restore(map_location="meta").state["w"].device.type, "meta")   # torch.load's own


class StagingTest(unittest.TestCase):
    """CUDA tensors go through pinned host buffers on save, tagged with their
    device (_serialize.HostStaging); without a GPU the tag and the
    walk are checked on CPU tensors."""

    @unittest.skipUnless(hasattr(torch.Tensor, "untyped_storage"), "torch < 2.0")
    def test_a_staged_host_copy_is_saved_as_on_the_device_it_came_from(self):
        host = torch.arange(4.0)
        ser._register_tagger()
        ser._staged_locations[host.untyped_storage().data_ptr()] = "cuda:0"
        buf = io.BytesIO()
        try:
            torch.save({"w": host}, buf)
        finally:
            ser._staged_locations.clear()
        self.assertTrue(torch.equal(torch.load(io.BytesIO(buf.getvalue()), map_location="cpu",
                                               weights_only=True)["w"], host))
        if CUDA:
            w = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)["w"]
            self.assertEqual(str(w.device), "cuda:0")
        else:   # back to the GPU it came from: there is none here, and torch says so
            with self.assertRaisesRegex(RuntimeError, "CUDA"):
                torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
        # Untagged, a CPU tensor is saved as on the CPU.
        buf = io.BytesIO()
        torch.save({"w": host}, buf)
        self.assertEqual(torch.load(io.BytesIO(buf.getvalue()), weights_only=True)["w"].device.type, "cpu")

    def test_the_walk_keeps_tied_tensors_shared_and_a_state_dicts_metadata(self):
        w, other = torch.ones(2), torch.zeros(1)
        sd = collections.OrderedDict(a=w, b=w)   # tied weights
        sd._metadata = {"": {"version": 1}}
        seen = []

        def double(t):
            seen.append(t)
            return t * 2

        out = ser._map_tensors({"model": sd, "opt": [3, (w, "x", other)], "obj": Opaque(1)}, double, {})
        self.assertEqual(len(seen), 2)   # w once, other once
        self.assertIs(out["model"]["a"], out["model"]["b"])
        self.assertIs(out["opt"][1][0], out["model"]["a"])
        self.assertEqual(type(out["model"]), collections.OrderedDict)
        self.assertEqual(out["model"]._metadata, {"": {"version": 1}})
        self.assertEqual((out["opt"][0], out["opt"][1][1]), (3, "x"))
        self.assertTrue(torch.equal(out["model"]["a"], torch.full((2,), 2.0)))

    @unittest.skipUnless(CUDA, "no CUDA device")
    def test_cuda_tensors_are_copied_to_host_on_save_and_restored_to_their_device(self):
        agent = Agent()
        m = MemoryCheckpoint(agent.path, 0, 1, note=lambda s: None)
        w = torch.arange(1000.0, device="cuda")
        for step in (1, 2):   # the second save reuses the pinned buffers
            w.add_(1.0)
            m.save(step, {"model": collections.OrderedDict(a=w, tied=w), "cpu": torch.ones(2), "n": step})
        self.assertEqual(len(m._staging._buffers), 1)
        self.assertTrue(m._staging._buffers[0].is_pinned())
        got = m.restore()
        self.assertEqual(got.state["model"]["a"].device.type, "cpu")
        self.assertTrue(torch.equal(got.state["model"]["a"], w.cpu()))
        self.assertIs(got.state["model"]["a"], got.state["model"]["tied"])
        back = m.restore(map_location=None).state
        self.assertEqual(str(back["model"]["a"].device), str(w.device))
        self.assertEqual(back["cpu"].device.type, "cpu")
        self.assertTrue(torch.equal(back["model"]["a"], w))


class CollectiveDeviceTest(unittest.TestCase):
    """restore()'s collectives run where the default group's backend can."""

    def test_the_device_follows_the_backend(self):
        cases = [("gloo", "cpu"), ("GLOO", "cpu"), ("mpi", "cpu"), ("nccl", "cuda"), ("nccl2", "cuda"),
                 ("nccl-lazy", "cuda"), ("cpu:gloo,cuda:nccl", "cpu"), ("cuda:nccl,cpu:gloo", "cpu"),
                 ("cuda:nccl", "cuda"), ("cuda:nccl2", "cuda"), ("a-backend-of-ones-own", "cpu")]
        for backend, device in cases:
            self.assertEqual(collective_device_type(backend), device, backend)
        # torch's capability table decides for the backends it names.
        self.assertEqual(collective_device_type("xccl", {"xccl": ["xpu"]}), "xpu")
        self.assertEqual(collective_device_type("ucc", {"ucc": ["cpu", "cuda"]}), "cpu")
        self.assertEqual(collective_device_type("nccl", {"nccl": ["cpu"]}), "cuda")   # never CPU, whatever it says

    def group(self, backend):
        import torch.distributed as dist
        dist.init_process_group(backend, init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
        self.addCleanup(dist.destroy_process_group)

    def test_a_gloo_group_sums_the_cpu_tensor_in_place(self):
        self.group("gloo")
        t = torch.tensor([1.0, 2.0], dtype=torch.float64)
        mc._all_reduce_sum(t, 2)   # a world of 2 says reduce; this group has 1 rank
        self.assertEqual(t.tolist(), [1.0, 2.0])

    @unittest.skipUnless(CUDA and torch.distributed.is_nccl_available(), "no CUDA device or no NCCL")
    def test_an_nccl_only_group_sums_the_cpu_tensor_on_the_rank_s_gpu(self):
        torch.cuda.set_device(0)
        self.group("nccl")
        t = torch.tensor([1.0, 2.0], dtype=torch.float64)
        mc._all_reduce_sum(t, 2)
        self.assertEqual((t.device.type, t.tolist()), ("cpu", [1.0, 2.0]))


if __name__ == "__main__":
    unittest.main()
