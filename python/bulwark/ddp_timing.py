"""Compute and communication time per step for an unmodified DDP job.

The fail-slow detector compares each machine's compute time per step with
the others'. In a synchronous job the step time alone cannot say who is
slow: the slow machine computes longer, and everyone else waits longer in
the all-reduce. A script that passes bulwark.step() no `compute_ms` gets
one measured here instead:

- comm: every DistributedDataParallel made in this process gets a
  communication hook that runs the all-reduce it would have run anyway
  (torch's default allreduce_hook, or the script's own hook, which it
  still registers with register_comm_hook as before) and records when each
  bucket's all-reduce was launched and when it completed. A step's
  communication time is the window from the first launch to the last
  completion since the previous step: the time the gradients spent in
  flight, which on a fast machine is mostly waiting for the slow one.
- compute: the time since the previous step, less that window.

On CUDA the clock is the GPU's. An NCCL all-reduce's future completes
when the collective is enqueued, not when it ends, so the host's clock
would read a window of about 0 ms and fail-slow would be blind. A bucket
whose tensors are on CUDA instead gets two timing events: one recorded on
the current stream before the hook launches the all-reduce (the bucket's
gradients are ready there), one in the Future.then callback, which torch
runs on a stream that waits for the all-reduce's kernels. The window,
first start to last end on the GPU, is read when the step is reported
(take_comm_ms): each end event is waited for there, by which time a step
that read its loss after the optimizer step has already waited for them
(the read is queued behind the all-reduces).

Overhead: on the CPU two monotonic clock reads and a lock per bucket, and a
Future.then per bucket; on CUDA two events recorded per bucket instead of
the clock reads, and at the step's report one event wait and elapsed_time
per bucket. It is installed when torch's DDP module is loaded,
before or after `import bulwark`. BULWARK_TIME_DDP=0 turns it off. A
script that calls register_builtin_comm_hook cannot be timed (torch allows
one hook per model): its steps report no compute time, as before.
"""

import importlib.abc
import importlib.util
import os
import sys
import threading
import time

_lock = threading.Lock()
_window = None  # [first launch, last completion] of the all-reduces since the last take
_events = []    # (start, end) CUDA events of the all-reduces since the last take, in launch order
# The CUDA event class (torch.cuda.Event); tests put a fake one here.
_event_class = None


def _new_event():
    global _event_class
    if _event_class is None:
        import torch
        _event_class = torch.cuda.Event
    return _event_class(enable_timing=True)


def _record(start, end):
    global _window
    with _lock:
        if _window is None:
            _window = [start, end]
        else:
            _window[0] = min(_window[0], start)
            _window[1] = max(_window[1], end)


# A script that never reports a step never takes its events: beyond this
# many they are dropped rather than kept for ever (a model has a few
# dozen buckets a step).
_MAX_EVENTS = 4096


def _record_events(start, end):
    with _lock:
        if len(_events) >= _MAX_EVENTS:
            del _events[:]
        _events.append((start, end))


def _gpu_window_ms(pairs):
    """First start to last end of `pairs` on the GPU's clock, in ms. The
    starts were recorded in launch order on the stream that computes the
    gradients, so the first is the earliest."""
    first = pairs[0][0]
    window = 0.0
    for _, end in pairs:
        end.synchronize()
        window = max(window, first.elapsed_time(end))
    return window


def take_comm_ms(since):
    """The communication window since monotonic time `since`, in ms, or None
    when no all-reduce completed since the last call. A step on CUDA is
    timed on the GPU's clock (its events), which `since` does not bound:
    the events of one step are those recorded since the last call."""
    global _window, _events
    with _lock:
        w, _window = _window, None
        pairs, _events = _events, []
    if pairs:
        try:
            return _gpu_window_ms(pairs)
        except Exception as e:  # timing must never stop training
            sys.stderr.write("bulwark: cannot read DDP's all-reduce time on the GPU (%s)\n" % e)
            return None
    if w is None:
        return None
    return max(0.0, w[1] - max(w[0], since)) * 1000.0


def _timed(ddp, bucket):
    state, hook = ddp._bulwark_inner
    if bucket.buffer().is_cuda:
        return _timed_on_gpu(state, hook, bucket)
    start = time.monotonic()
    fut = hook(state, bucket)

    def done(f):
        _record(start, time.monotonic())
        return f.value()

    return fut.then(done)


def _timed_on_gpu(state, hook, bucket):
    """The module's docstring: events around the all-reduce, on the GPU."""
    start = _new_event()
    start.record()   # the current stream: the bucket's gradients are ready here
    fut = hook(state, bucket)

    def done(f):
        # Run on a stream that waits for the all-reduce (Future.then), so
        # this event completes when the all-reduce does.
        end = _new_event()
        end.record()
        _record_events(start, end)
        return f.value()

    return fut.then(done)


def _patch(ddp_cls):
    if getattr(ddp_cls, "_bulwark_timed", False):
        return
    init, register = ddp_cls.__init__, ddp_cls.register_comm_hook

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        try:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            self._bulwark_inner = (None, default_hooks.allreduce_hook)  # None: the default group
            register(self, self, _timed)
        except Exception as e:  # timing must never stop training
            sys.stderr.write("bulwark: cannot time DDP's all-reduce (%s); compute time is not reported\n" % e)
            self._bulwark_inner = None

    def register_comm_hook(self, state, hook):
        # The script's own hook runs inside the timing one.
        if getattr(self, "_bulwark_inner", None) is not None and not getattr(self, "_bulwark_user_hook", False):
            self._bulwark_inner = (state, hook)
            self._bulwark_user_hook = True
            return None
        return register(self, state, hook)

    ddp_cls.__init__ = __init__
    ddp_cls.register_comm_hook = register_comm_hook
    ddp_cls._bulwark_timed = True


_MODULE = "torch.nn.parallel.distributed"


class _PatchOnLoad(importlib.abc.MetaPathFinder):
    """Patches DDP once torch loads it, for a script that imports bulwark first."""

    def find_spec(self, name, path, target=None):
        if name != _MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module.DistributedDataParallel)

        spec.loader.exec_module = exec_and_patch
        return spec


def install():
    """Times every DDP model of this process (see the module's docstring)."""
    if os.environ.get("BULWARK_TIME_DDP", "1") == "0":
        return
    module = sys.modules.get(_MODULE)
    if module is not None:
        _patch(module.DistributedDataParallel)
    elif not any(isinstance(f, _PatchOnLoad) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnLoad())
