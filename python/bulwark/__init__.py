"""Report a training rank's progress to its bulwark agent.

The agent that starts a rank names a Unix SOCK_SEQPACKET socket in the
environment variable BULWARK_RANK_SOCKET (the "rank link", the protocol
bulwark-train speaks from src/client/rank_link.cc). Over it the rank says
HELLO once, then one STEP line per completed step and a PHASE line before a
long pause that is not a step (an evaluation, a checkpoint). The agent sums
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

import math
import os
import socket
import sys
import threading
import time

__all__ = ["RankLink", "step", "phase", "link"]

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
        self._send("HELLO %d %d" % (rank, os.getpid()))

    def _send(self, text):
        try:
            self._sock.send(text.encode(), socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            pass  # the agent is behind: drop this report, the next one carries on
        except OSError:
            pass  # the agent is gone: it restarts this rank, nothing to tell

    def step(self, step, loss=None, grad_norm=None, local_grad_norm=None, compute_ms=None, comm_ms=None):
        """Step `step` completed. Its duration is the time since the previous
        call (or since connecting). `local_grad_norm` is this rank's own
        gradient norm before the all-reduce: with it a NaN is pinned on the
        rank that produced it. `compute_ms` feeds the fail-slow detector,
        which compares compute time per step across machines; without it
        that detector stays silent for this job."""
        now = time.monotonic()
        with self._lock:
            step_ms = (now - self._last) * 1000.0
            self._last = now
            nonfinite = not (_finite(loss) and _finite(grad_norm))
            local_nonfinite = not _finite(local_grad_norm)
            # STEP step steps loss grad_norm local_grad_norm step_ms compute_ms
            #      comm_ms local_nonfinite nonfinite halted observed_ms
            self._send("STEP %d 1 %s %s %s %.3f %.3f %.3f %d %d - %d" % (
                int(step), _number(loss or 0), _number(grad_norm or 0), _number(local_grad_norm or 0),
                step_ms, float(compute_ms or 0), float(comm_ms or 0),
                1 if local_nonfinite else 0, 1 if nonfinite else 0, int(time.time() * 1000)))

    def phase(self, what, expected_s, after_step):
        """A pause that is not a step begins after `after_step` and should take
        about `expected_s` seconds: the hang detector allows for it."""
        word = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(what)) or "phase"
        with self._lock:
            self._send("PHASE %s %.0f %d" % (word, float(expected_s) * 1000.0, int(after_step)))
            self._last = time.monotonic()

    def close(self):
        with self._lock:
            self._sock.close()


_link = None
_link_lock = threading.Lock()
_given_up = False


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
        try:
            _link = RankLink(path, int(os.environ.get("RANK", "0")))
        except OSError as e:
            sys.stderr.write("bulwark: %s=%s names no listening agent (%s); progress is not reported\n"
                             % (RANK_SOCKET_ENV, path, e))
            _given_up = True
        return _link


def step(step, loss=None, grad_norm=None, local_grad_norm=None, compute_ms=None, comm_ms=None):
    """Reports a completed step (see RankLink.step); a no-op outside bulwark."""
    l = link()
    if l is not None:
        l.step(step, loss=loss, grad_norm=grad_norm, local_grad_norm=local_grad_norm,
               compute_ms=compute_ms, comm_ms=comm_ms)


def phase(what, expected_s, after_step):
    """Announces a pause that is not a step (see RankLink.phase)."""
    l = link()
    if l is not None:
        l.phase(what, expected_s, after_step)
