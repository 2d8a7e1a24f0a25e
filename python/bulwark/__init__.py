"""A training rank's side of bulwark: progress and in-memory checkpoints.

Progress (this module) and every-step in-memory checkpoints (memory_checkpoint.py:
bulwark.save / bulwark.restore, torch only there).

The agent that starts a rank names a Unix SOCK_SEQPACKET socket in the
environment variable BULWARK_RANK_SOCKET (the "rank link", the protocol
bulwark-train speaks from src/rank_client/rank_link.cc). Over it the rank says
HELLO once, then one STEP line per completed step and a PHASE line before a
long pause that is not a step (an evaluation, a checkpoint; the client
announces the interpreter's exit after the last step itself). The agent sums
the steps into its heartbeat. The controller's hang, NaN and spike detectors
and its ETTR ledger then treat this job like bulwark-train.

    import bulwark
    for step in range(start, steps):
        loss = train_step()
        bulwark.step(step, loss=loss, grad_norm=norm)

Outside bulwark (the variable unset) every call is a no-op. Sends never
block: a full socket drops the report rather than slow the step, and the
next report supersedes it anyway. If the agent that set the variable is not
listening, a warning is printed once and reporting stops; training goes on.
"""

import contextlib
import math
import os
import re
import socket
import sys
import threading
import time

from . import ddp_timing, pace

__all__ = ["RankLink", "step", "phase", "link", "save", "restore", "resumed_from_disk", "memory", "peer_loss_exits",
           "is_peer_lost", "run", "EXIT_PEER_LOST"]

RANK_SOCKET_ENV = "BULWARK_RANK_SOCKET"


def _number(x):
    """A value as the agent parses it (C's strtod reads nan and inf)."""
    return format(float(x), ".9g")


def _finite(x):
    return x is None or math.isfinite(float(x))


class RankLink:
    """One rank's connection to its agent. Thread-safe."""

    def __init__(self, path, rank):
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._sock.connect(path)
        except OSError:
            self._sock.close()
            raise
        self._last = time.monotonic()
        self._last_cpu = time.process_time()
        self._last_step = None  # the newest step reported, for the exit phase
        self._abort = self._yield = False  # the agent's word, read by take_abort / take_yield
        self._held = []  # an ASSIGN read while looking for that word
        self._pace = pace.Pace.from_env()  # None outside bulwark's local backend
        self._send("HELLO %d %d" % (rank, os.getpid()))
        _at_interpreter_exit(self._announce_exit)

    def _send(self, text):
        try:
            self._sock.send(text.encode(), socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            pass  # the agent is behind: drop this report, the next one carries on
        except OSError:
            pass  # the agent is gone: it restarts this rank, nothing to tell

    def step(self, step, loss=None, grad_norm=None, local_grad_norm=None, compute_ms=None, comm_ms=None,
             tokens=None):
        """Step `step` completed. Its duration is the time since the previous
        call (or since connecting). `local_grad_norm` is this rank's own
        gradient norm before the all-reduce: with it a NaN is pinned on the
        rank that produced it. `compute_ms` feeds the fail-slow detector,
        which compares compute time per step across machines. Without it,
        a DDP job's is measured (ddp_timing.py: the step's time less its
        all-reduce window, and that window as `comm_ms`), with its device
        time (on a CPU the process's CPU time over the step), by which the
        detector compares machines; a job with neither leaves that
        detector silent. On a machine that bulwark's local backend
        slows (pace.py) the step is stretched here, before it is timed. `tokens`, the tokens the
        whole job processed in this step (batch x context x data-parallel
        ranks), gives the controller's tokens/s; rank 0's count is used."""
        with self._lock:
            # Taken every step, so that a window never carries into the next.
            measured = ddp_timing.take_comm_ms(self._last)
            on_cpu = not _cuda_in_use()
            if self._pace is not None:
                # A throttled machine, emulated (pace.py): the step so far
                # takes `factor` x its compute.
                wall_ms = (time.monotonic() - self._last) * 1000.0 - (measured or 0.0)
                cpu_ms = (time.process_time() - self._last_cpu) * 1000.0
                pace.stretch(self._pace.poll(), cpu_ms if on_cpu else wall_ms, on_cpu)
            now, cpu_now = time.monotonic(), time.process_time()
            step_ms = (now - self._last) * 1000.0
            device_ms = None
            if measured is not None:
                if compute_ms is None:
                    compute_ms = max(0.0, step_ms - measured)
                    # The device's time, by which the fail-slow detector
                    # compares machines: a CPU's is the CPU time the step
                    # took (blocked waits take none), which other processes
                    # on a shared host do not change; a GPU's, the compute.
                    device_ms = (cpu_now - self._last_cpu) * 1000.0 if on_cpu else compute_ms
                if comm_ms is None:
                    comm_ms = measured
            self._last, self._last_cpu = now, cpu_now
            self._last_step = int(step)
            nonfinite = not (_finite(loss) and _finite(grad_norm))
            local_nonfinite = not _finite(local_grad_norm)
            # STEP step steps loss grad_norm local_grad_norm step_ms compute_ms
            #      comm_ms local_nonfinite nonfinite halted observed_ms [tokens [device_ms]]
            tail = ""
            if tokens or device_ms:
                tail = " %d" % int(tokens or 0)
            if device_ms:
                tail += " %.3f" % float(device_ms)
            self._send("STEP %d 1 %s %s %s %.3f %.3f %.3f %d %d - %d" % (
                int(step), _number(loss or 0), _number(grad_norm or 0), _number(local_grad_norm or 0),
                step_ms, float(compute_ms or 0), float(comm_ms or 0),
                1 if local_nonfinite else 0, 1 if nonfinite else 0, int(time.time() * 1000)) + tail)

    def phase(self, what, expected_s, after_step):
        """A pause that is not a step begins after `after_step` and should take
        about `expected_s` seconds: the hang detector allows for it."""
        word = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(what)) or "phase"
        with self._lock:
            self._send("PHASE %s %.0f %d" % (word, float(expected_s) * 1000.0, int(after_step)))
            self._last, self._last_cpu = time.monotonic(), time.process_time()

    def _announce_exit(self):
        """The interpreter is shutting down: the steps are over, and what
        follows (threads joined, atexit handlers, torch's teardown: about
        a second for torch 2.15 on an idle CPU, several on a loaded one)
        is no hang. Nothing to say before the first step."""
        if self._last_step is not None and self._sock.fileno() >= 0:
            self.phase("exit", EXIT_EXPECTED_S, self._last_step)

    @property
    def last_step(self):
        """The newest step this process reported, or None."""
        return self._last_step

    def hello(self, rank):
        """This process now is `rank` (after an ASSIGN): the agent's view
        of the link follows, and the hang detector hears a new start."""
        with self._lock:
            self._sock.send(("HELLO %d %d" % (rank, os.getpid())).encode())
            self._last, self._last_cpu = time.monotonic(), time.process_time()

    def offer_in_place(self):
        """Says INPLACE: this process can wait for an ASSIGN (generations.py)."""
        with self._lock:
            self._sock.send(b"INPLACE")

    def fileno(self):
        """The socket, for a wait that must also hear the agent (ring.py)."""
        return self._sock.fileno()

    def _read_pending(self):
        """The agent's messages that have come, without waiting: its word
        that the generation is over, and any ASSIGN, kept for
        await_assignment. Other injections are bulwark-train's."""
        while True:
            try:
                msg = self._sock.recv(8192, socket.MSG_DONTWAIT).decode(errors="replace")
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if not msg:
                return
            if msg == "INJECT abort":
                self._abort = True
            elif msg == "INJECT yield":
                self._yield = True
            elif msg.startswith("ASSIGN ") or msg.startswith("SPLICE "):
                self._held.append(msg)

    def take_abort(self):
        """Whether the agent said INJECT abort: end the collective now."""
        with self._lock:
            self._read_pending()
            return self._abort

    def take_yield(self):
        """Whether the agent asked this rank to stop between steps (a yield,
        or an abort that came between steps, which is taken as one)."""
        with self._lock:
            self._read_pending()
            return self._yield or self._abort

    def await_assignment(self, why, step, timeout_s):
        """Says `why` ("LOST", "READY"), then waits up to `timeout_s` (None:
        forever) for the agent's ASSIGN: a generations.Assignment, or None
        when the time ran out or the agent closed the link. Injections
        meant for the ended generation are skipped."""
        from .generations import parse_assignment
        text = why if why == "READY" else "%s %d" % (why, int(step))
        end = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            self._abort = self._yield = False  # that word was for the generation that ends here
            try:
                self._sock.send(text.encode())  # blocking: the agent must hear it
                while self._held:
                    try:
                        return parse_assignment(self._held.pop(0))
                    except ValueError as e:
                        sys.stderr.write("bulwark: %s\n" % e)
                while True:
                    left = None if end is None else end - time.monotonic()
                    if left is not None and left <= 0:
                        return None
                    self._sock.settimeout(left)
                    msg = self._sock.recv(8192).decode(errors="replace")
                    if not msg:
                        return None  # the agent closed the link
                    # A SPLICE that came too late to be voted on serves as the ASSIGN.
                    if msg.startswith("ASSIGN ") or msg.startswith("SPLICE "):
                        try:
                            return parse_assignment(msg)
                        except ValueError as e:
                            sys.stderr.write("bulwark: %s\n" % e)
                            return None
            except (socket.timeout, OSError):
                return None
            finally:
                try:
                    self._sock.settimeout(None)
                except OSError:
                    pass

    def close(self):
        with self._lock:
            self._sock.close()


# The time a rank's interpreter is allowed to take to exit after its last
# step, before the hang detector's factor (hang_factor x this).
EXIT_EXPECTED_S = 10.0


def _at_interpreter_exit(fn):
    """Calls `fn` as the interpreter begins to exit: before non-daemon
    threads are joined and before atexit's handlers, which a user's code
    may fill with slow ones (a tracker's upload). threading's own hook
    (Python 3.9 and later, what concurrent.futures uses) runs then; atexit
    where it is missing."""
    hook = getattr(threading, "_register_atexit", None)
    try:
        if hook is not None:
            hook(fn)
            return
    except RuntimeError:
        pass  # already shutting down
    import atexit
    atexit.register(fn)


def _cuda_in_use():
    """Whether this process computes on a GPU (torch has initialized CUDA)."""
    torch = sys.modules.get("torch")
    try:
        return torch is not None and torch.cuda.is_initialized()
    except AttributeError:
        return False


_link = None
_link_lock = threading.Lock()
_given_up = False

# Under bulwark, a DDP job's compute time is measured unless it says it.
if os.environ.get(RANK_SOCKET_ENV):
    ddp_timing.install()


def link():
    """This process's RankLink, connected on first use; None outside bulwark."""
    global _link, _given_up
    with _link_lock:
        if _link is not None or _given_up:
            return _link
        path = os.environ.get(RANK_SOCKET_ENV, "")
        if not path:
            _given_up = True
            return None
        # A pre-spawned spare has no rank until its ASSIGN (generations.py).
        rank = -1 if os.environ.get("BULWARK_PRESPAWN") else int(os.environ.get("RANK", "0"))
        try:
            _link = RankLink(path, rank)
        except OSError as e:
            sys.stderr.write("bulwark: %s=%s names no listening agent (%s); progress is not reported\n"
                             % (RANK_SOCKET_ENV, path, e))
            _given_up = True
        return _link


def step(step, loss=None, grad_norm=None, local_grad_norm=None, compute_ms=None, comm_ms=None, tokens=None):
    """Reports a completed step (see RankLink.step); a no-op outside bulwark."""
    l = link()
    if l is not None:
        l.step(step, loss=loss, grad_norm=grad_norm, local_grad_norm=local_grad_norm,
               compute_ms=compute_ms, comm_ms=comm_ms, tokens=tokens)


def phase(what, expected_s, after_step):
    """Announces a pause that is not a step (see RankLink.phase)."""
    l = link()
    if l is not None:
        l.phase(what, expected_s, after_step)


# --- in-memory checkpoints (memory_checkpoint.py) ---------------------------------------

_memory = None
_memory_tried = False


def _rank_and_world():
    """From torch.distributed once it is set up, else torchrun's variables."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def memory():
    """This process's MemoryCheckpoint, connected on first use; None outside
    bulwark (BULWARK_SHARD_SOCKET unset) or when the agent is not listening."""
    global _memory, _memory_tried
    with _link_lock:
        if _memory is not None or _memory_tried:
            return _memory
        _memory_tried = True
        from . import memory_checkpoint as _m
        path = os.environ.get(_m.SHARD_SOCKET_ENV, "")
        if not path:
            return None
        rank, world = _rank_and_world()
        try:
            _memory = _m.MemoryCheckpoint(path, rank, world)
        except OSError as e:
            sys.stderr.write("bulwark: %s=%s names no listening agent (%s); no in-memory checkpoints\n"
                             % (_m.SHARD_SOCKET_ENV, path, e))
        return _memory


def _forget_memory():
    """A new generation (generations.py): the next memory() connects as
    its rank and world."""
    global _memory, _memory_tried
    with _link_lock:
        if _memory is not None:
            _memory.close()
        _memory, _memory_tried = None, False


def restore(weights_only=True, map_location="cpu", safe_globals=()):
    """Collective (call it on every rank, after init_process_group): the
    newest step every rank holds a checkpoint of, as memory_checkpoint.Restored (.step,
    .state as given to save(), .source, .newest_step, .ms), with this rank's
    RNG states put back; None on a first start or outside bulwark.

    The state is loaded with torch.load(weights_only=True): tensors, plain
    values and containers. `safe_globals` allows more classes (torch >=
    2.5); weights_only=False loads any object, for a job that trusts its
    own checkpoints. Tensors land on the CPU (`map_location`; None: each on
    the device it was saved from). See memory_checkpoint.py."""
    m = memory()
    rank, world = _rank_and_world()
    if world > 1:
        # All ranks or none: a mixed world would disagree in the collectives.
        import torch
        from . import memory_checkpoint as _m
        missing = torch.tensor([0.0 if m is not None else 1.0], dtype=torch.float64)
        _m._all_reduce_sum(missing, world)
        if missing.item() > 0:
            if m is not None:
                sys.stderr.write("bulwark: another rank has no agent; no in-memory checkpoints\n")
            return None
    if m is None:
        return None
    return m.restore(weights_only=weights_only, map_location=map_location, safe_globals=safe_globals)


def save(step, state):
    """Checkpoints `state` (e.g. {"model": model.state_dict(), "optimizer":
    opt.state_dict()}) as step `step` into the agent's memory, after the
    optimizer step; a no-op outside bulwark."""
    m = memory()
    if m is not None:
        m.save(step, state)


def resumed_from_disk(step):
    """Say so when the job resumed from a checkpoint of its own at `step`
    (restore() found none): later in-memory checkpoints start a timeline of
    their own, never mixed with copies of the abandoned one."""
    m = memory()
    if m is not None:
        m.resumed_from_disk(step)


# --- exits -------------------------------------------------------------------

# bulwark-train's exit code for "a collective failed: a peer died, hung or
# was cut off" (src/common/exit_codes.h). The agent holds such an exit back
# for a few seconds: if the peer's own fault and the restart it causes come
# first, the exit was its echo and is dropped. Any other exit counts as a
# crash of this rank's machine, and a second one within 10 minutes evicts it.
EXIT_PEER_LOST = 3
# What Gloo (and NCCL's TCP store) say when the other side is gone, and what
# NCCL says on a survivor (ncclRemoteError, and its transport's last error);
# the same words as the agent's connection_reset signatures
# (config/signatures.tsv). Not NCCL's system, internal or CUDA errors: those
# are this rank's own, and its exit must count against its machine.
_PEER_LOST = re.compile(r"Connection reset by peer|Connection closed by peer|Connection refused|Broken pipe|"
                        r"Timed out waiting|peer lost|"
                        r"remote process exited or there was a network error|ncclRemoteError|"
                        r"Got completion from peer|Connection closed by remote peer", re.IGNORECASE)


def is_peer_lost(e):
    """Whether exception `e` is a collective's failure because a peer is gone."""
    return isinstance(e, RuntimeError) and _PEER_LOST.search(str(e)) is not None


@contextlib.contextmanager
def peer_loss_exits():
    """Within it, a collective that fails because a peer is gone ends the
    rank with EXIT_PEER_LOST instead of a traceback's exit code 1:

        with bulwark.peer_loss_exits():
            train()

    Other errors pass through unchanged."""
    try:
        yield
    except RuntimeError as e:
        if not is_peer_lost(e):
            raise
        sys.stderr.write("bulwark: a collective failed, a peer is gone (exit %d): %s\n" % (EXIT_PEER_LOST, e))
        sys.stdout.flush()
        sys.stderr.flush()
        # Not sys.exit: tearing down a process group whose peer is dead can
        # block, and the agent is waiting for this exit.
        os._exit(EXIT_PEER_LOST)


from .generations import run  # noqa: E402  (generations.py imports this module lazily)
