"""Elastic data parallelism for a PyTorch script: the survivors keep training.

A replica lost (a killed rank, a machine down, a frozen one) costs the
others the step it broke and nothing more. Their processes, models and
optimizers stay; they regroup without it over bulwark's ring (ring.py),
redo the step with its micro-batches spread over them, so the global batch
does not change, and train on at the narrower width until a standby or the
returned machine brings the job back to full width, the newcomer taking its
state from a live peer.

    import bulwark.elastic
    torch.manual_seed(0)                        # the same initial weights on every rank
    model, opt = Model(), torch.optim.AdamW(...)
    rep = bulwark.elastic.Replicas(model, opt, replicas=4, micro_batches=2)
    for step in rep.steps(1000):
        for j in rep.micro_batches():           # this rank's share of the step
            x, y = batch(step, j)               # micro-batch j of step `step`
            rep.backward(loss_fn(model(x), y), j)
        rep.step()                              # reduce, then opt.step()

with `recovery: {mode: elastic}` in the job file (or `bulwark run
--recovery elastic`). A step is `replicas` x `micro_batches` micro-batches;
a world of W ranks takes them round robin (rank r computes j = r, r + W,
...), so the data of a step and its order are the same at any width, as
bulwark-train's `--elastic-replicas` (docs/recovery.md). `steps()` yields a
step again when the reduction of its first try failed.

With `exact=True` (the default) the gradient sum is the same to the bit at
any width and in any order: each micro-batch's gradient is rounded to a
64-bit fixed-point integer at an exponent every rank agrees on (from the
all-reduced maximum |g|, which is exact), the integers are summed (exact in
any order), and the sum converted back once, so a run that lost replicas
ends bitwise on the fault-free run. The losses travel in one slot per
micro-batch (x + 0 = x). The price: an int64 all-reduce (twice a float's
bytes), one 8-byte all-reduce of the maximum, and a copy of each
micro-batch's gradient kept until the step's reduction. `exact=False`
sums float32 gradients: within float tolerance of the fault-free run.

Under bulwark the collectives go over the ring the controller plans; run
by torchrun (a process group initialized), over torch.distributed with no
fault tolerance; alone, one process computes every micro-batch (the
reference run).
"""

import io
import json
import math
import os
import sys
import time

import numpy as np

from . import ring as ringlib

__all__ = ["Replicas"]

RING_ADDR_ENV = "BULWARK_RING_ADDR"
RING_PLAN_ENV = "BULWARK_RING_PLAN"


def _say(text):
    sys.stderr.write("bulwark: %s\n" % text)
    sys.stderr.flush()


class _Solo:
    """One process, every micro-batch: nothing to reduce with."""
    rank, world, form_ms = 0, 1, 0.0

    def all_reduce(self, a, op="sum"):
        return a

    def broadcast(self, data, root):
        return data

    def close(self):
        pass


class _TorchComm:
    """A process group the script formed (torchrun): collectives over it,
    with no fault tolerance."""
    form_ms = 0.0

    def __init__(self):
        import torch.distributed as dist
        self._dist = dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def all_reduce(self, a, op="sum"):
        import torch
        t = torch.from_numpy(a)
        self._dist.all_reduce(t, op=self._dist.ReduceOp.SUM if op == "sum" else self._dist.ReduceOp.MAX)
        return a

    def broadcast(self, data, root):
        box = [data]
        self._dist.broadcast_object_list(box, src=root)
        return box[0]

    def close(self):
        pass


class Replicas:
    """`model` and `optimizer` as one data-parallel replica of `replicas`
    (see the top of this file). The model's parameters must be the same on
    every rank at the start (seed them alike): a fresh process that joins a
    running job takes a live peer's instead."""

    def __init__(self, model, optimizer, replicas, micro_batches=1, exact=True, max_norm=None, timeout_s=30.0):
        if replicas < 1 or micro_batches < 1:
            raise ValueError("bulwark.elastic: replicas and micro_batches must be at least 1, not %d and %d"
                             % (replicas, micro_batches))
        import bulwark
        self.model, self.optimizer = model, optimizer
        self.replicas, self.micro, self.exact, self.max_norm = replicas, micro_batches, exact, max_norm
        self.timeout_s = timeout_s
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.step_done = 0   # the newest step whose update this process applied
        self.loss = None     # the last step's global loss
        self.grad_norm = None
        self._link = bulwark.link()
        self._listener = None
        self._comm = None
        self._kept, self._losses = {}, None
        self._step, self._committed = None, False
        self._generation = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) + 1
        self._stats = {"generations": 0, "redone": 0, "received_state": 0}
        self._regrouped = None  # (monotonic, wall ms) a generation's end began, until its next step completes
        if self._link is not None:
            self._link.offer_in_place()  # the agent hands a survivor its next generation
            if os.environ.get("BULWARK_PRESPAWN"):
                self._wait_as_spare()

    # --- the loop ----------------------------------------------------------

    @property
    def rank(self):
        return self._form().rank

    @property
    def world(self):
        return self._form().world

    def steps(self, total):
        """Steps step_done + 1 .. total; a step whose reduction failed is
        yielded again, in the next generation."""
        while True:
            self._between_steps()
            self._form()  # a joiner's step is its live peers' (the generation's first all-reduce)
            s = self.step_done + 1
            if s > total:
                return
            self._step, self._committed = s, False
            self._kept, self._losses = {}, np.zeros(self.replicas * self.micro, dtype=np.float64)
            self._t0, self._comm_s = time.monotonic(), 0.0
            yield s

    def micro_batches(self):
        """The micro-batches j of this step that this rank computes."""
        c = self._form()
        return list(range(c.rank, self.replicas * self.micro, c.world))

    def backward(self, loss, j):
        """loss.backward() for micro-batch j, its gradient kept aside."""
        loss.backward()
        flat = self._take_grads()
        if self.exact:
            self._kept[j] = flat
        elif "sum" in self._kept:
            self._kept["sum"] += flat
        else:
            self._kept["sum"] = flat
        self._losses[j] = float(loss.detach())

    def step(self):
        """The step's reduction, then optimizer.step() on every rank with the
        same gradient. False when a peer was lost: the step is redone."""
        try:
            flat, total_loss = self._reduce()
        except ringlib.RingError as e:
            self._stats["redone"] += 1
            self._lost(e)
            return False
        self._apply(flat)
        self.step_done, self._committed = self._step, True
        n = self.replicas * self.micro
        self.loss = total_loss / n
        import bulwark
        wall = time.monotonic() - self._t0
        bulwark.step(self.step_done, loss=self.loss, grad_norm=self.grad_norm,
                     compute_ms=(wall - self._comm_s) * 1000.0, comm_ms=self._comm_s * 1000.0)
        if self._regrouped is not None:
            # The first step of a new generation: when it completed (wall
            # clock, for a stall measured from a fault's injection) and how
            # long since the last one ended.
            print(json.dumps({"event": "regrouped", "generation": self._generation, "world": self._comm.world,
                              "step": self.step_done, "wall_ms": int(time.time() * 1000),
                              "since_end_ms": round((time.monotonic() - self._regrouped) * 1000.0, 1)}), flush=True)
            self._regrouped = None
        return True

    def state_dict(self):
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step_done}

    def load_state_dict(self, state):
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step_done = int(state["step"])

    # --- the reduction -----------------------------------------------------

    def _take_grads(self):
        import torch
        parts = []
        for p in self.params:
            if p.grad is None:
                parts.append(torch.zeros(p.numel(), dtype=torch.float32))
            else:
                parts.append(p.grad.detach().reshape(-1).to("cpu", torch.float32))
                p.grad = None
        return torch.cat(parts).numpy().copy() if parts else np.zeros(0, dtype=np.float32)

    def _size(self):
        return sum(p.numel() for p in self.params)

    def _reduce(self):
        c, n = self._form(), self.replicas * self.micro
        size = self._size()
        if not self.exact:
            g = self._kept.get("sum", np.zeros(size, dtype=np.float32))
            losses = self._losses.copy()
            t = time.monotonic()
            c.all_reduce(g, "sum")
            c.all_reduce(losses, "sum")
            self._comm_s += time.monotonic() - t
            return g / np.float32(n), float(np.sum(losses))
        local_max = max((float(np.max(np.abs(g))) for g in self._kept.values() if g.size), default=0.0)
        mx = np.array([local_max], dtype=np.float64)
        t = time.monotonic()
        c.all_reduce(mx, "max")
        self._comm_s += time.monotonic() - t
        # |g| < 2^e for every micro-batch's g; each is rounded on a grid fine
        # enough that the n of them sum below 2^62.
        e = math.frexp(float(mx[0]))[1] if mx[0] > 0 and math.isfinite(mx[0]) else 0
        shift = 62 - max(1, math.ceil(math.log2(n))) - e
        scale = math.ldexp(1.0, shift)
        buf = np.zeros(size + n, dtype=np.int64)
        q = buf[:size]
        for g in self._kept.values():
            q += np.rint(g.astype(np.float64) * scale).astype(np.int64)
        # The losses as their bits: one rank fills each slot, so the sum of
        # the integers is that rank's float, to the bit.
        buf[size:] = self._losses.view(np.int64)
        if not math.isfinite(mx[0]):
            q[:] = 0  # a NaN or inf: its loss reports it, the update is skipped
        t = time.monotonic()
        c.all_reduce(buf, "sum")
        self._comm_s += time.monotonic() - t
        losses = buf[size:].view(np.float64)
        flat = (q.astype(np.float64) * math.ldexp(1.0, -shift) / n).astype(np.float32)
        loss = float(np.sum(losses)) if math.isfinite(mx[0]) else float("nan")
        return flat, loss

    def _apply(self, flat):
        import torch
        g = torch.from_numpy(flat)
        self.grad_norm = float(torch.linalg.vector_norm(g.double()))
        if self.max_norm is not None and self.grad_norm > self.max_norm:
            g.mul_(self.max_norm / (self.grad_norm + 1e-6))
        at = 0
        for p in self.params:
            k = p.numel()
            p.grad = g[at: at + k].view_as(p).to(p.device, p.dtype)
            at += k
        if math.isfinite(self.grad_norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    # --- generations -------------------------------------------------------

    def _form(self):
        """This generation's communicator, formed on first use."""
        if self._comm is not None:
            return self._comm
        env = os.environ
        plan, addr = env.get(RING_PLAN_ENV, ""), env.get(RING_ADDR_ENV, "")
        if plan and addr:
            if self._listener is None or self._listener.address != addr:
                if self._listener is not None:
                    self._listener.close()
                self._listener = ringlib.Listener(addr)
            rank, world = int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1"))
            interrupt = (self._link.fileno(), self._link.take_abort) if self._link is not None else None
            try:
                self._comm = ringlib.Ring(self._listener, plan, rank, world, self.timeout_s, interrupt)
            except ringlib.RingError as e:
                self._lost(e)
                return self._form()
        else:
            dist = sys.modules.get("torch.distributed")
            if dist is not None and dist.is_available() and dist.is_initialized():
                self._comm = _TorchComm()
            else:
                if self._link is not None and self.replicas > 1 and int(env.get("WORLD_SIZE", "1")) > 1:
                    raise RuntimeError("bulwark.elastic: this rank has no ring plan (BULWARK_RING_PLAN): submit the "
                                       "job with recovery: {mode: elastic}")
                self._comm = _Solo()
        self._stats["generations"] += 1
        self._sync_live_state()
        return self._comm

    def _sync_live_state(self):
        """Every rank at the newest step: those behind (a spare, a joiner, a
        survivor whose last reduction failed while a peer's completed) take
        the state of the lowest rank that holds it."""
        c = self._comm
        if c.world == 1:
            self._say_if_from_scratch(self.step_done)
            return
        steps = np.zeros(c.world, dtype=np.int64)  # one slot per rank: the sum is every rank's step
        steps[c.rank] = self.step_done
        try:
            c.all_reduce(steps, "sum")
            newest = int(np.max(steps))
            root = int(np.argmax(steps == newest))
            behind = [r for r in range(c.world) if steps[r] != newest]
            self._say_if_from_scratch(newest)
            if not behind:
                return
            t = time.monotonic()
            data = self._pack() if c.rank == root else b""
            data = c.broadcast(data, root)
            if self.step_done != newest:
                self._unpack(data)
                self._stats["received_state"] += 1
                _say("rank %d: took step %d's state from live rank %d (%d bytes, %.0f ms)"
                     % (c.rank, newest, root, len(data), (time.monotonic() - t) * 1000.0))
        except ringlib.RingError as e:
            self._lost(e)
            self._form()

    def _say_if_from_scratch(self, newest):
        """A restarted job (not its first generation) with no live replica
        at any step: every rank was lost, and there is no durable copy of an
        elastic Python job's state yet. Said, never silent."""
        if newest == 0 and self._generation > 1 and self._link is not None:
            _say("rank %d: generation %d: no live replica holds state (every rank was lost), and bulwark.elastic "
                 "keeps no durable checkpoint yet: training starts again from step 0" % (self._comm.rank,
                                                                                         self._generation))

    def _pack(self):
        import torch
        out = io.BytesIO()
        torch.save(self.state_dict(), out)
        return out.getvalue()

    def _unpack(self, data):
        import torch
        self.load_state_dict(torch.load(io.BytesIO(data), weights_only=True))

    def _between_steps(self):
        """The agent's word between steps: a yield (the job grows back) ends
        this generation at a step boundary."""
        if self._link is None or self._comm is None or not self._link.take_yield():
            return
        self._next_generation("WAIT", "asked to yield at step %d" % self.step_done)

    def _lost(self, why):
        self._next_generation("LOST", "a peer is gone at step %d (%s)" % (self.step_done + 1,
                                                                          str(why).splitlines()[0][:160]))

    def _next_generation(self, word, what):
        from .generations import ASSIGN_WAIT_S, adopt
        import bulwark
        if self._comm is not None:
            self._comm.close()
            self._comm = None
        if self._link is None:
            raise RuntimeError("bulwark.elastic: " + what)
        t = time.monotonic()
        if self._regrouped is None:
            self._regrouped = t
        _say("rank %s: %s; waiting for the next generation" % (os.environ.get("RANK", "?"), what))
        a = self._link.await_assignment(word, self.step_done, ASSIGN_WAIT_S)
        if a is None:
            _say("no next generation came: exit %d" % bulwark.EXIT_PEER_LOST)
            sys.stdout.flush()
            os._exit(bulwark.EXIT_PEER_LOST)
        adopt(a)
        self._link.hello(a.rank)
        self._link.offer_in_place()
        self._generation = a.generation
        _say("rank %d of generation %d (world %d), in place after %.0f ms, at step %d, pid %d"
             % (a.rank, a.generation, a.world_size, (time.monotonic() - t) * 1000.0, self.step_done, os.getpid()))

    def _wait_as_spare(self):
        """A pre-spawned spare: set up (the model built), it waits for the
        rank of a process that is gone, and takes a live peer's state."""
        from .generations import _process_start, adopt
        print(json.dumps({"event": "spare_ready", "pid": os.getpid(),
                          "setup_ms": round((time.time() - _process_start()) * 1000.0, 1)}), flush=True)
        a = self._link.await_assignment("READY", 0, None)
        if a is None:
            sys.exit(0)  # the agent no longer needs this spare
        adopt(a)
        self._link.hello(a.rank)
        self._link.offer_in_place()
        self._generation = a.generation
        _say("rank %d of generation %d (world %d), as a pre-spawned spare, pid %d"
             % (a.rank, a.generation, a.world_size, os.getpid()))
