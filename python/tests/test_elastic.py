"""bulwark.elastic and its ring (python/bulwark/elastic.py, ring.py), in
real processes over real sockets: the ring's sums and its failure, the
exact sum's bits at every width, and a job that loses a replica, trains on
at the narrower width and grows back, under a stand-in agent that speaks
the rank link as bulwark's does. Every wait has a deadline."""

import multiprocessing as mp
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from bulwark import ring  # noqa: E402


def free_ports(n):
    """n ports nothing listens on now (bound and released)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def plan(nonce, addrs):
    return "%d;0;" % nonce + ",".join("%d=%s" % (r, a) for r, a in enumerate(addrs))


def ring_member(r, addrs, q, die_at):
    L = ring.Listener(addrs[r])
    R = ring.Ring(L, plan(11, addrs), r, len(addrs), timeout_s=20)
    for it in range(4):
        a = np.arange(1001, dtype=np.int64) * (r + 1)
        m = np.array([float(r), -float(r)])
        if it == die_at[0] and r == die_at[1]:
            os._exit(9)
        t = time.monotonic()
        try:
            R.all_reduce(a, "sum")
            R.all_reduce(m, "max")
        except ring.RingError as e:
            q.put((r, it, "failed", time.monotonic() - t, str(e)))
            return
        q.put((r, it, int(a[1000]), float(m[0]), float(m[1])))
    q.put((r, "broadcast", R.broadcast(b"state" * 100000 if r == 2 else b"", 2) == b"state" * 100000))


class RingTest(unittest.TestCase):
    def run_ring(self, W, die_at=(-1, -1)):
        q = mp.get_context("fork").Queue()
        addrs = ["127.0.0.1:%d" % p for p in free_ports(W)]
        ps = [mp.get_context("fork").Process(target=ring_member, args=(r, addrs, q, die_at)) for r in range(W)]
        for p in ps:
            p.start()
        for p in ps:
            p.join(60)
        out = []
        while not q.empty():
            out.append(q.get())
        return out

    def test_sums_maxima_and_a_broadcast_at_every_width(self):
        for W in (1, 2, 3, 5):
            out = self.run_ring(W)
            sums = [o for o in out if o[1] != "broadcast"]
            self.assertEqual(len(sums), 4 * W, out)
            for o in sums:
                self.assertEqual(o[2], 1000 * W * (W + 1) // 2)  # exact
                self.assertEqual((o[3], o[4]), (float(W - 1), 0.0))
            if W >= 3:
                self.assertEqual(sorted(o for o in out if o[1] == "broadcast"), [(r, "broadcast", True) for r in range(W)])

    def test_a_dead_member_fails_every_other_at_once(self):
        out = self.run_ring(4, die_at=(2, 1))
        failed = [o for o in out if o[2] == "failed"]
        self.assertEqual(sorted(o[0] for o in failed), [0, 2, 3], out)
        for o in failed:
            self.assertEqual(o[1], 2)
            self.assertLess(o[3], 5.0, "failed by the EOF going round, not the 20 s timeout: %r" % (o,))
            self.assertIn("peer lost", o[4])

    def test_a_plan_that_is_not_one_is_refused_with_its_text(self):
        with self.assertRaisesRegex(ValueError, "rank=addr:port"):
            ring.decode_plan("5;0;0=nowhere")
        self.assertEqual(ring.decode_plan("5;0;0=a:1,3=b:2;1.2.3"), (5, {0: "a:1", 3: "b:2"}))


# A job a user would write, small enough to run many times: an MLP, the
# data of micro-batch j of step s drawn from (s, j).
SCRIPT = r'''
import hashlib, json, os, sys, time
import torch
import bulwark.elastic
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
rep = bulwark.elastic.Replicas(model, opt, replicas=3, micro_batches=2, exact=os.environ.get("EXACT", "1") == "1")
die = int(os.environ.get("DIE_AT", "0"))
for step in rep.steps(int(os.environ.get("STEPS", "30"))):
    for j in rep.micro_batches():
        if step == die:
            os._exit(9)
        g = torch.Generator().manual_seed(step * 100 + j)
        x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
        rep.backward(torch.nn.functional.cross_entropy(model(x), y), j)
    rep.step()
    if os.environ.get("SLOW"):
        time.sleep(float(os.environ["SLOW"]))
d = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
print(json.dumps({"done": rep.step_done, "rank": rep.rank, "world": rep.world, "sum": d, "loss": rep.loss,
                  "pid": os.getpid(), "stats": rep._stats}), flush=True)
'''


def script():
    path = os.path.join(tempfile.mkdtemp(), "job.py")
    with open(path, "w") as f:
        f.write(SCRIPT)
    return path


def start(path, env):
    full = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."), OMP_NUM_THREADS="1", **env)
    return subprocess.Popen([sys.executable, path], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def result(p, timeout=120):
    out, err = p.communicate(timeout=timeout)
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if not lines:
        raise AssertionError("no result (exit %s): %s" % (p.returncode, err[-2000:]))
    import json
    return json.loads(lines[-1]), err


def at_width(path, W, env=None):
    addrs = ["127.0.0.1:%d" % p for p in free_ports(W)]
    procs = [start(path, dict(env or {}, BULWARK_RING_ADDR=addrs[r], BULWARK_RING_PLAN=plan(3, addrs), RANK=str(r),
                              WORLD_SIZE=str(W))) for r in range(W)]
    return [result(p)[0] for p in procs]


class StandInAgent:
    """One rank link per rank, as bulwark-agent serves them: it records what
    each rank says and sends what the test tells it to."""

    def __init__(self, ranks):
        self.dir = tempfile.mkdtemp()
        self.said = {r: [] for r in range(ranks)}
        self.conns = {}
        self.lock = threading.Condition()
        self.paths = {}
        for r in range(ranks):
            path = os.path.join(self.dir, "rank%d.sock" % r)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.bind(path)
            s.listen(2)
            self.paths[r] = path
            threading.Thread(target=self._serve, args=(r, s), daemon=True).start()

    def _serve(self, slot, s):
        while True:
            c, _ = s.accept()
            threading.Thread(target=self._read, args=(slot, c), daemon=True).start()

    def _read(self, slot, c):
        while True:
            try:
                m = c.recv(8192).decode()
            except OSError:
                return
            if not m:
                return
            with self.lock:
                self.conns[slot] = c
                self.said[slot].append(m)
                self.lock.notify_all()

    def wait_said(self, slot, prefix, timeout=60):
        end = time.monotonic() + timeout
        with self.lock:
            while not any(m.startswith(prefix) for m in self.said[slot]):
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("rank slot %d never said %s: %r" % (slot, prefix, self.said[slot][-5:]))
                self.lock.wait(left)

    def send(self, slot, text):
        with self.lock:
            self.conns[slot].send(text.encode())


def assign(gen, rank, world, addr, the_plan):
    return "ASSIGN %d %d %d %d %d 127.0.0.1 29999 -1 - %s %s" % (gen, rank, rank, world, world, addr, the_plan)


class ReplicasTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.path = script()
        cls.reference = at_width(cls.path, 1)[0]

    def test_the_exact_sum_ends_on_the_same_bits_at_every_width(self):
        for W in (2, 3):
            for r in at_width(self.path, W):
                self.assertEqual((r["done"], r["sum"], r["loss"]), (30, self.reference["sum"], self.reference["loss"]))

    def test_the_float_sum_ends_within_tolerance(self):
        ref = at_width(self.path, 1, {"EXACT": "0"})[0]
        got = at_width(self.path, 3, {"EXACT": "0"})[0]
        self.assertAlmostEqual(got["loss"], ref["loss"], delta=1e-4)

    def test_survivors_train_on_without_the_lost_replica_then_grow_back_bitwise(self):
        agent = StandInAgent(3)
        addrs = ["127.0.0.1:%d" % p for p in free_ports(3)]
        env = lambda r: {"BULWARK_RANK_SOCKET": agent.paths[r], "BULWARK_RING_ADDR": addrs[r],
                         "BULWARK_RING_PLAN": plan(1, addrs), "RANK": str(r), "WORLD_SIZE": "3", "SLOW": "0.05"}
        procs = [start(self.path, dict(env(r), DIE_AT="10" if r == 2 else "0")) for r in range(3)]
        # Rank 2 dies inside step 10; the survivors' reduction fails and they wait.
        for r in (0, 1):
            agent.wait_said(r, "LOST 9")
        self.assertEqual(procs[2].wait(30), 9)
        narrow = plan(2, addrs[:2])
        for r in (0, 1):
            agent.send(r, assign(2, r, 2, addrs[r], narrow))
        # They redo step 10 at width 2 and train on; then a joiner comes
        # (a fresh process, no state) and the survivors are asked to yield.
        for r in (0, 1):
            agent.wait_said(r, "STEP 15 ")
        full = plan(3, addrs)
        joiner = start(self.path, dict(env(2), BULWARK_RING_PLAN=full))
        for r in (0, 1):
            agent.send(r, "INJECT yield")
        for r in (0, 1):
            agent.wait_said(r, "WAIT ")
            agent.send(r, assign(3, r, 3, addrs[r], full))
        out = [result(p) for p in procs[:2]] + [result(joiner)]
        for (r, err), pid in zip(out, [procs[0].pid, procs[1].pid, joiner.pid]):
            self.assertEqual((r["done"], r["world"], r["pid"]), (30, 3, pid), err[-2000:])
            self.assertEqual(r["sum"], self.reference["sum"], "the run diverged from the fault-free one:\n" + err[-3000:])
        self.assertIn("took step ", out[2][1])  # the joiner's state came from a live peer
        self.assertEqual(out[0][0]["stats"]["redone"], 1, out[0][1][-2000:])
        self.assertEqual(out[0][0]["stats"]["received_state"], 0, "a survivor keeps its own state")


if __name__ == "__main__":
    unittest.main()
