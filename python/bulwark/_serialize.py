"""How memory_checkpoint.py turns a state into an image's sections and back:
torch.save with CUDA tensors staged through pinned host memory, torch.load
with weights_only and the fix named when it refuses, and the RNG states as
plain values. The why is in memory_checkpoint.py's docstring."""

import collections
import contextlib
import io
import pickle
import random
import re
import sys
import threading

__all__ = ["HostStaging", "load", "rng_state", "set_rng_state"]


# --- saving: CUDA tensors staged through host memory --------------------------

# The device each staged host buffer's storage came from, by the storage's
# address, while torch.save runs (_tag_staged).
_staged_locations = {}
_staged_lock = threading.Lock()
_tagger_registered = False


def _tag_staged(storage):
    """torch.serialization's location tagger, ahead of torch's own: a staged
    buffer is saved as on the device it was copied from."""
    if not _staged_locations:
        return None
    try:
        return _staged_locations.get(storage.data_ptr())
    except (AttributeError, RuntimeError):
        return None


def _register_tagger():
    global _tagger_registered
    if not _tagger_registered:
        import torch.serialization
        # Priority 5: before torch's "cpu" tagger (10). The deserializer
        # never claims a storage: torch's own restores "cuda:N" tags.
        torch.serialization.register_package(5, _tag_staged, lambda storage, location: None)
        _tagger_registered = True


def _map_tensors(obj, fn, memo):
    """`obj` with each tensor t in its dicts, OrderedDicts, lists and tuples
    replaced by fn(t), in the order the walk meets them; other objects are
    left as they are (torch.save copies their CUDA tensors itself). A tensor
    met twice (tied weights) maps to one result, so it stays shared."""
    import torch
    if isinstance(obj, torch.Tensor):
        key = id(obj)
        if key not in memo:
            memo[key] = (obj, fn(obj))   # obj is kept alive, so its id is not reused
        return memo[key][1]
    kind = type(obj)
    if kind is dict or kind is collections.OrderedDict:
        out = kind((k, _map_tensors(v, fn, memo)) for k, v in obj.items())
        if hasattr(obj, "_metadata"):   # a state_dict's versions, read by load_state_dict
            out._metadata = obj._metadata
        return out
    if kind is list:
        return [_map_tensors(v, fn, memo) for v in obj]
    if kind is tuple:
        return tuple(_map_tensors(v, fn, memo) for v in obj)
    return obj


class HostStaging:
    """torch.save for a state that may hold CUDA tensors: each is copied to
    a pinned host buffer with non_blocking=True, then one event per device
    is waited for, instead of one synchronous copy per storage inside
    torch.save. The buffers are kept for the next save (a state's tensors
    keep their shapes from step to step). On a process that has not
    initialized CUDA nothing is walked: torch.save as it is."""

    def __init__(self):
        self._buffers = []   # pinned host buffers, by the order the walk meets CUDA tensors

    def save(self, obj):
        import torch
        buf = io.BytesIO()
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            torch.save(obj, buf)
            return buf
        _register_tagger()
        locations, devices = {}, set()
        n = [0]

        def stage(t):
            if not t.is_cuda or t.numel() == 0:
                return t
            i = n[0]
            n[0] += 1
            if i == len(self._buffers):
                self._buffers.append(None)
            host = self._buffers[i]
            if host is None or host.shape != t.shape or host.dtype != t.dtype:
                host = self._buffers[i] = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
            host.copy_(t.detach(), non_blocking=True)
            locations[host.untyped_storage().data_ptr()] = str(t.device)
            devices.add(t.device)
            return host

        staged = _map_tensors(obj, stage, {})
        del self._buffers[n[0]:]   # tensors the state no longer has
        # The copies were enqueued on each device's current stream, after
        # the work that produced the tensors: one event per device says
        # they are all in host memory.
        for d in devices:
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(d))
            done.synchronize()
        with _staged_lock:
            _staged_locations.update(locations)
            try:
                torch.save(staged, buf)
            finally:
                for ptr in locations:
                    _staged_locations.pop(ptr, None)
        return buf


# --- loading -------------------------------------------------------------------

_old_torch_noted = False


def load(data, weights_only, map_location, safe_globals, where):
    """torch.load of one image's section; a refusal of weights_only names
    the object and the fix."""
    import torch
    global _old_torch_noted
    if weights_only and not hasattr(torch.serialization, "add_safe_globals"):
        # Before torch 2.4 the safe loader cannot read a float (torch 1.13:
        # "Unsupported operand 71"), so no state_dict of an optimizer; those
        # torches load everything by default, and so does this.
        if not _old_torch_noted:
            sys.stderr.write("bulwark: torch %s has no usable weights_only loader; checkpoints load with "
                             "weights_only=False (torch 2.4 or later loads them safely)\n" % torch.__version__)
            _old_torch_noted = True
        weights_only = False
    allow = contextlib.nullcontext()
    if safe_globals and weights_only:
        context = getattr(torch.serialization, "safe_globals", None)
        if context is None:
            raise RuntimeError("bulwark.restore(safe_globals=...) needs torch 2.5 or later (this is torch %s); "
                               "pass weights_only=False instead" % torch.__version__)
        allow = context(list(safe_globals))
    try:
        with allow:
            return torch.load(io.BytesIO(data), map_location=map_location, weights_only=bool(weights_only))
    except pickle.UnpicklingError as e:
        if not weights_only:
            raise
        said = re.search(r"WeightsUnpickler error: ([^\n]*)", str(e))
        raise pickle.UnpicklingError(
            "%s holds an object that torch.load(weights_only=True) refuses (%s). If this job's checkpoints are "
            "trusted: allow its classes with bulwark.restore(safe_globals=[...]) (torch >= 2.5), or load any "
            "object with bulwark.restore(weights_only=False)" % (where, said.group(1) if said else e)) from None


# --- RNG states, as plain values (weights_only loads them) -----------------------

def rng_state():
    import torch
    s = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        s["cuda"] = torch.cuda.get_rng_state_all()
    np = sys.modules.get("numpy")
    if np is not None:
        st = np.random.get_state(legacy=True)
        if isinstance(st, tuple):   # MT19937, numpy's global generator
            name, keys, pos, has_gauss, gauss = st
            # Plain ints and floats, not an ndarray: loading an ndarray needs
            # numpy's globals allowed.
            s["numpy"] = (str(name), keys.tolist(), int(pos), int(has_gauss), float(gauss))
    return s


def set_rng_state(s):
    import torch
    torch.set_rng_state(s["torch"])
    random.setstate(s["python"])
    if "cuda" in s and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])
    np = sys.modules.get("numpy")
    if "numpy" in s and np is not None:
        name, keys, pos, has_gauss, gauss = s["numpy"]   # keys: a list (an ndarray in older images)
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
