"""The Python client's side of the rank link, against a socket standing in
for the agent: the exact lines the agent's parser (rank_client::StepSignal::Parse)
reads, and no-ops outside bulwark."""

import importlib
import os
import socket
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bulwark  # noqa: E402


class Agent:
    """A listening rank-link socket."""

    def __init__(self):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "ranks.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(self.path)
        self.sock.listen(4)
        self.conn = None

    def recv(self):
        if self.conn is None:
            self.sock.settimeout(5)
            self.conn, _ = self.sock.accept()
            self.conn.settimeout(5)
        return self.conn.recv(512).decode()


def run_under(agent, body):
    """`body` (after `import bulwark`) in a child process whose rank link is `agent`."""
    code = "import sys; sys.path.insert(0, %r)\nimport bulwark\n%s\n" % (os.path.join(os.path.dirname(__file__), ".."), body)
    env = dict(os.environ, BULWARK_RANK_SOCKET=agent.path, RANK="0")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def fresh(env):
    """The module as a new process would load it, with `env`."""
    for k in ("BULWARK_RANK_SOCKET", "RANK"):
        os.environ.pop(k, None)
    os.environ.update(env)
    return importlib.reload(bulwark)


class ClientTest(unittest.TestCase):
    def test_outside_bulwark_every_call_is_a_no_op(self):
        b = fresh({})
        b.step(1, loss=2.0)
        b.phase("eval", 3.0, 1)
        self.assertIsNone(b.link())

    def test_hello_then_steps_in_the_agents_format(self):
        agent = Agent()
        b = fresh({"BULWARK_RANK_SOCKET": agent.path, "RANK": "3"})
        b.step(7, loss=2.5, grad_norm=0.75, compute_ms=80)
        self.assertEqual(agent.recv(), "HELLO 3 %d" % os.getpid())
        w = agent.recv().split()
        self.assertEqual(len(w), 13)  # StepSignal::Parse: 13 words, 14 with tokens
        self.assertEqual(w[:6], ["STEP", "7", "1", "2.5", "0.75", "0"])
        self.assertGreaterEqual(float(w[6]), 0.0)   # step ms
        self.assertEqual(w[7:12], ["80.000", "0.000", "0", "0", "-"])
        self.assertGreater(int(w[12]), 1_700_000_000_000)  # ms since the epoch

    def test_tokens_travel_as_a_fourteenth_word(self):
        agent = Agent()
        b = fresh({"BULWARK_RANK_SOCKET": agent.path})
        b.step(2, loss=1.0, tokens=16384)
        agent.recv()  # HELLO
        w = agent.recv().split()
        self.assertEqual(len(w), 14)  # StepSignal::Parse takes 13, or 14 with tokens
        self.assertEqual(w[13], "16384")

    def test_a_nan_loss_is_reported_as_non_finite(self):
        agent = Agent()
        b = fresh({"BULWARK_RANK_SOCKET": agent.path})
        b.step(4, loss=float("nan"), local_grad_norm=float("inf"))
        agent.recv()  # HELLO
        w = agent.recv().split()
        self.assertEqual(w[3], "nan")
        self.assertEqual(w[5], "inf")
        self.assertEqual(w[9:11], ["1", "1"])

    def test_a_phase_is_one_word_with_milliseconds(self):
        agent = Agent()
        b = fresh({"BULWARK_RANK_SOCKET": agent.path})
        b.phase("save checkpoint", 2.5, 40)
        agent.recv()  # HELLO
        self.assertEqual(agent.recv(), "PHASE save_checkpoint 2500 40")

    def test_the_interpreters_exit_after_a_step_is_announced_as_a_phase(self):
        # torch's teardown alone takes about a second after the last step:
        # without the phase a loaded host's exit looks like a hang.
        agent = Agent()
        r = run_under(agent, "bulwark.step(12)")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [agent.recv() for _ in range(3)]
        self.assertTrue(lines[1].startswith("STEP 12 "), lines)
        self.assertEqual(lines[2], "PHASE exit %.0f 12" % (bulwark.EXIT_EXPECTED_S * 1000))

    def test_an_exit_before_any_step_says_nothing(self):
        agent = Agent()
        r = run_under(agent, "bulwark.link()")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(agent.recv().startswith("HELLO 0 "))
        self.assertEqual(agent.recv(), "")  # closed: no PHASE

    def test_no_listening_agent_warns_once_and_training_goes_on(self):
        b = fresh({"BULWARK_RANK_SOCKET": "/nonexistent/ranks.sock"})
        b.step(1)
        b.step(2)
        self.assertIsNone(b.link())


class DdpTimingTest(unittest.TestCase):
    """bulwark.ddp_timing: a DDP step reported without compute_ms gets one
    measured (the step's time less its all-reduce window)."""

    def test_a_ddp_step_without_compute_ms_reports_the_measured_split(self):
        try:
            import torch
            import torch.distributed as dist
            import torch.nn as nn
            from torch.nn.parallel import DistributedDataParallel as DDP
        except ImportError:
            self.skipTest("no torch in this python")
        agent = Agent()
        b = fresh({"BULWARK_RANK_SOCKET": agent.path})  # installs the timing hook
        dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
        try:
            model = DDP(nn.Linear(16, 1))
            self.assertTrue(getattr(type(model), "_bulwark_timed", False))
            b.link()
            for step in (1, 2):
                model(torch.randn(8, 16)).sum().backward()
                b.step(step, loss=1.0)
            model(torch.randn(8, 16)).sum().backward()
            b.step(3, loss=1.0, compute_ms=5)  # the script's own figure wins
        finally:
            dist.destroy_process_group()
        agent.recv()  # HELLO
        agent.recv()  # step 1: its all-reduce began before the link did
        w = agent.recv().split()
        step_ms, compute_ms, comm_ms = float(w[6]), float(w[7]), float(w[8])
        self.assertGreater(comm_ms, 0.0)
        self.assertGreater(compute_ms, 0.0)
        self.assertAlmostEqual(compute_ms + comm_ms, step_ms, delta=0.01)
        w = agent.recv().split()
        self.assertEqual(w[7], "5.000")
        self.assertGreater(float(w[8]), 0.0)  # the window still measured


class DdpWindowTest(unittest.TestCase):
    """ddp_timing's window without a process group: the CPU path's clock
    window, and the CUDA path's events (a fake event class, so no GPU)."""

    def setUp(self):
        from bulwark import ddp_timing
        self.t = ddp_timing
        self.t.take_comm_ms(0.0)   # nothing left from another test
        self.addCleanup(setattr, ddp_timing, "_event_class", ddp_timing._event_class)

    def test_the_cpu_window_runs_from_the_first_launch_to_the_last_completion(self):
        self.t._record(10.0, 10.5)
        self.t._record(10.2, 10.9)   # a second bucket, launched later, done last
        self.assertAlmostEqual(self.t.take_comm_ms(9.0), 900.0)
        self.assertIsNone(self.t.take_comm_ms(11.0))   # taken: the next step starts empty
        # A window that began before the previous report counts from it.
        self.t._record(10.0, 10.5)
        self.assertAlmostEqual(self.t.take_comm_ms(10.3), 200.0)

    def test_a_cuda_bucket_is_timed_by_events_on_the_gpu_and_read_at_the_report(self):
        gpu = FakeGpu()
        self.t._event_class = gpu.Event
        # Two buckets: launched at 100 and 110 ms on the GPU's clock, their
        # all-reduces end at 130 and 150. The host sees both futures done at
        # once (NCCL's complete at enqueue), the events do not.
        ddp = type("Ddp", (), {})()
        ddp._bulwark_inner = (None, gpu.hook)
        for launch, end in ((100.0, 130.0), (110.0, 150.0)):
            gpu.now, gpu.ends_at = launch, end
            out = self.t._timed(ddp, FakeBucket())
            self.assertEqual(out.value(), "reduced")   # the hook's result goes on to DDP
        self.assertEqual(len(gpu.events), 4)
        self.assertFalse(any(e.synced for e in gpu.events))   # nothing waited for while the step runs
        self.assertAlmostEqual(self.t.take_comm_ms(0.0), 50.0)   # 100 -> 150
        self.assertTrue(all(e.synced for e in gpu.events[1::2]))   # each end waited for at the report
        self.assertIsNone(self.t.take_comm_ms(0.0))


class FakeBucket:
    """A GradBucket whose gradients are on CUDA."""

    def buffer(self):
        return type("Buffer", (), {"is_cuda": True})()


class FakeGpu:
    """A GPU clock, torch.cuda.Event on it, and a comm hook whose future
    completes at enqueue while its all-reduce ends at `ends_at`."""

    def __init__(self):
        self.now, self.ends_at, self.events = 0.0, 0.0, []
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing, "elapsed_time needs enable_timing=True"
                self.at, self.synced = None, False
                gpu.events.append(self)

            def record(self, stream=None):
                self.at = gpu.now

            def synchronize(self):
                self.synced = True

            def elapsed_time(self, end):
                return end.at - self.at

        self.Event = Event

    def hook(self, state, bucket):
        gpu = self

        class Future:
            def __init__(self, value):
                self._value = value

            def value(self):
                return self._value

            def then(self, callback):
                # torch runs the callback on a stream that waits for the
                # all-reduce: an event recorded there completes at its end.
                gpu.now = gpu.ends_at
                return Future(callback(self))

        return Future("reduced")


class GenerationsTest(unittest.TestCase):
    """bulwark.run in a child process under a socket standing in for the
    agent: a lost peer is a LOST and a wait in place, an ASSIGN the next
    generation in the same process; a spare says READY first."""

    CHILD = """import os, sys; sys.path.insert(0, %r)
import bulwark
calls = []
def train(tag):
    calls.append((os.environ.get("RANK"), os.environ.get("WORLD_SIZE"), os.environ.get("MASTER_PORT")))
    if len(calls) == 1 and not os.environ.get("BULWARK_PRESPAWN_DONE"):
        bulwark.step(7)
        raise RuntimeError("[../gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:4242")
    print("calls", calls, tag, flush=True)
    return "done"
print("returned", bulwark.run(train, "x"), flush=True)
"""

    def start(self, agent, extra=None):
        code = self.CHILD % os.path.join(os.path.dirname(__file__), "..")
        env = dict(os.environ, BULWARK_RANK_SOCKET=agent.path, RANK="0", WORLD_SIZE="2", MASTER_PORT="5000",
                   **(extra or {}))
        env.pop("BULWARK_SHARD_SOCKET", None)
        return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def recv_until(self, agent, prefix):
        for _ in range(10):
            m = agent.recv()
            if m.startswith(prefix):
                return m
        self.fail("no %s from the rank" % prefix)

    def store(self):
        """A port that listens, standing in for rank 0's store (run waits
        for it before a non-zero rank's next generation)."""
        l = socket.socket()
        l.bind(("127.0.0.1", 0))
        l.listen(8)
        self.addCleanup(l.close)
        return l.getsockname()[1]

    def test_a_lost_peer_waits_in_place_for_the_next_generation(self):
        agent = Agent()
        port = self.store()
        p = self.start(agent)
        self.assertTrue(agent.recv().startswith("HELLO 0 %d" % p.pid))
        self.assertEqual(agent.recv(), "INPLACE")
        self.recv_until(agent, "STEP 7 ")
        self.assertEqual(self.recv_until(agent, "LOST"), "LOST 7")
        agent.conn.send(b"INJECT nan")  # meant for the ended generation: skipped
        agent.conn.send(b"ASSIGN 2 1 0 3 1 127.0.0.1 %d -1 -" % port)
        self.assertEqual(agent.recv(), "HELLO 1 %d" % p.pid)  # the same process, a new rank
        self.assertEqual(agent.recv(), "INPLACE")
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("calls [('0', '2', '5000'), ('1', '3', '%d')] x" % port, out)
        self.assertIn("returned done", out)
        self.assertIn("rank 1 of generation 2 (world 3), in place after", err)

    def test_a_spare_says_ready_and_takes_the_rank_it_is_assigned(self):
        agent = Agent()
        port = self.store()
        p = self.start(agent, {"BULWARK_PRESPAWN": "1", "BULWARK_PRESPAWN_DONE": "1"})
        self.assertEqual(agent.recv(), "HELLO -1 %d" % p.pid)
        self.assertEqual(agent.recv(), "INPLACE")
        self.assertEqual(agent.recv(), "READY")
        agent.conn.send(b"ASSIGN 3 1 0 2 1 127.0.0.1 %d 0 -" % port)
        self.assertEqual(agent.recv(), "HELLO 1 %d" % p.pid)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn('"event": "spare_ready"', out)
        self.assertIn("calls [('1', '2', '%d')] x" % port, out)

    def test_a_spare_the_agent_no_longer_needs_ends_quietly(self):
        agent = Agent()
        p = self.start(agent, {"BULWARK_PRESPAWN": "1"})
        self.recv_until(agent, "READY")
        agent.conn.close()
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("returned None", out)

    def test_no_assignment_in_time_is_the_peer_lost_exit(self):
        agent = Agent()
        code = self.CHILD % os.path.join(os.path.dirname(__file__), "..")
        code = code.replace("import bulwark", "import bulwark, bulwark.generations as g; g.ASSIGN_WAIT_S = 0.5")
        env = dict(os.environ, BULWARK_RANK_SOCKET=agent.path, RANK="0")
        env.pop("BULWARK_SHARD_SOCKET", None)
        p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        self.recv_until(agent, "LOST")
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, bulwark.EXIT_PEER_LOST, err)
        self.assertIn("no next generation came", err)

    def test_other_errors_pass_through(self):
        r = run_under(Agent(), "def train():\n    raise ValueError('shapes')\nbulwark.run(train)")
        self.assertEqual(r.returncode, 1)
        self.assertIn("ValueError: shapes", r.stderr)

    def test_outside_bulwark_train_runs_once(self):
        code = ("import sys; sys.path.insert(0, %r)\nimport bulwark\n"
                "print(bulwark.run(lambda: 5))\n" % os.path.join(os.path.dirname(__file__), ".."))
        env = dict(os.environ)
        env.pop("BULWARK_RANK_SOCKET", None)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "5"), r.stderr)

    def test_an_assignment_parses_as_the_agent_formats_it(self):
        from bulwark.generations import parse_assignment
        a = parse_assignment("ASSIGN 4 2 1 4 2 10.0.0.1 29500 1 /tmp/rank-2.log 10.0.0.1:7000 plan")
        self.assertEqual((a.generation, a.rank, a.local_rank, a.world_size, a.backup_of, a.ring_addr),
                         (4, 2, 1, 4, 1, "10.0.0.1:7000"))
        for bad in ("ASSIGN 1 2 0 2 1 h 5000 -1", "ASSIGN 1 2 0 2 1 h 5000 -1 -", "ASSIGN 1 0 0 2 1 h 0 -1 -"):
            with self.assertRaises(ValueError):
                parse_assignment(bad)


class PeerLossExitTest(unittest.TestCase):
    """bulwark.peer_loss_exits() in a child process: its exit code is what
    the agent reads."""

    def run_child(self, body):
        code = ("import sys; sys.path.insert(0, %r)\nimport bulwark\nwith bulwark.peer_loss_exits():\n    %s\n"
                % (os.path.join(os.path.dirname(__file__), ".."), body))
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)

    def test_a_collective_that_lost_its_peer_exits_with_the_peer_lost_code(self):
        r = self.run_child("raise RuntimeError('[./gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:30939: "
                           "Connection reset by peer')")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("a peer is gone", r.stderr)

    def test_an_nccl_survivor_whose_peer_died_exits_with_the_peer_lost_code(self):
        # torch's DistBackendError for ncclRemoteError (a RuntimeError).
        r = self.run_child("raise RuntimeError('NCCL error in: ProcessGroupNCCL.cpp:3356, remote process exited or "
                           "there was a network error, NCCL version 2.30.7\\nncclRemoteError: A call failed possibly "
                           "due to a network error or a remote process exiting prematurely.\\nLast error:\\n"
                           "socketProgress: Connection closed by remote peer 10.0.0.2<41568>')")
        self.assertEqual(r.returncode, 3, r.stderr)

    def test_nccls_own_errors_are_this_ranks_and_pass_through(self):
        for what in ("NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO "
                     "for details), NCCL version 2.30.7",
                     "NCCL error in: ProcessGroupNCCL.cpp:3356, internal error - please report this issue to the "
                     "NCCL developers, NCCL version 2.30.7"):
            r = self.run_child("raise RuntimeError(%r)" % what)
            self.assertEqual(r.returncode, 1, what)
            self.assertNotIn("a peer is gone", r.stderr)

    def test_other_errors_pass_through(self):
        r = self.run_child("raise RuntimeError('mat1 and mat2 shapes cannot be multiplied')")
        self.assertEqual(r.returncode, 1)
        self.assertIn("shapes cannot be multiplied", r.stderr)
        self.assertNotIn("a peer is gone", r.stderr)


if __name__ == "__main__":
    unittest.main()
