"""The machine's compute pace, emulated: a throttled device (src/trainer/diag/pace.h).

Under bulwark's local backend, `bulwark inject slow --machine M --factor F`
writes F into the machine's emulated hardware, in the file that
BULWARK_PACE_FILE names. A rank that reports its steps through this client
carries the slowdown out itself, once a step in bulwark.step(): on a CPU it
burns (F - 1) x the CPU time its step took, as a CPU at 1/F of its clock
would spend; on a GPU it sleeps (F - 1) x the step's compute, the time a
host waits on a slower device. bulwark-train does the same. Why in the rank,
and why CPU time: four emulated machines share two cores here, and any
slowdown imposed from outside (stopping and continuing the processes)
measured the host's scheduler, not a slow machine.

Outside bulwark, or on a healthy machine, this costs one os.stat a step.
"""

import os
import time

PACE_FILE_ENV = "BULWARK_PACE_FILE"


class Pace:
    """The factor in BULWARK_PACE_FILE, read again when the file changes."""

    def __init__(self, path):
        self._path = path
        self._seen = None
        self._factor = 1.0
        self.poll()

    @classmethod
    def from_env(cls):
        path = os.environ.get(PACE_FILE_ENV, "")
        return cls(path) if path else None

    def poll(self):
        """The machine's factor now: 1.0 when healthy, absent or unreadable."""
        try:
            stamp = os.stat(self._path).st_mtime_ns
        except OSError:
            stamp = -1
        if stamp != self._seen:
            self._seen = stamp
            self._factor = 1.0
            if stamp != -1:
                try:
                    with open(self._path) as f:
                        v = float(f.readline().strip() or "1")
                    if 1.0 < v <= 1000.0:
                        self._factor = v
                except (OSError, ValueError):
                    pass
        return self._factor


def burn_cpu_ms(ms):
    """Spins on this thread until it has used `ms` more of CPU time."""
    until = time.thread_time() + ms / 1000.0
    while time.thread_time() < until:
        for _ in range(200):
            pass


def stretch(factor, compute_ms, on_cpu):
    """Makes a step whose compute took `compute_ms` (CPU time on a CPU, wall
    time on a GPU) take `factor` x that."""
    if not factor > 1.0 or not compute_ms > 0:
        return
    extra = (factor - 1.0) * compute_ms
    if on_cpu:
        burn_cpu_ms(extra)
    else:
        time.sleep(extra / 1000.0)
