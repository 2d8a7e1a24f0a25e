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

    def test_other_errors_pass_through(self):
        r = self.run_child("raise RuntimeError('mat1 and mat2 shapes cannot be multiplied')")
        self.assertEqual(r.returncode, 1)
        self.assertIn("shapes cannot be multiplied", r.stderr)
        self.assertNotIn("a peer is gone", r.stderr)


if __name__ == "__main__":
    unittest.main()
