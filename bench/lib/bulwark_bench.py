"""Helpers shared by the benchmarks: run bulwark-train and read what it
prints and saves. Standard library only (plus numpy for checkpoints)."""
import json
import os
import struct
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "build", "bin", "bulwark-train")


class Run:
    """One finished bulwark-train process: its JSON events and peak RSS."""

    def __init__(self, events, peak_rss_mb, rc, stderr):
        self.events, self.peak_rss_mb, self.rc, self.stderr = events, peak_rss_mb, rc, stderr

    def of(self, kind):
        return [e for e in self.events if e.get("event") == kind]


def train(args, env=None):
    """Runs bulwark-train with --log-format json; measures the child's peak
    resident memory with wait4, so concurrent runs do not mix."""
    cmd = [TRAIN, "--log-format", "json"] + list(args)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        rc = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        events = []
        for line in out.read().decode().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                pass
        run = Run(events, usage.ru_maxrss / 1024.0, rc, err.read().decode())
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with {rc}:\n{run.stderr[-2000:]}")
    return run


def read_record(path):
    """Sections of a RecordFile (src/common/record_file.h) as bytes."""
    data = open(path, "rb").read()
    assert data[:8] == b"BLWKREC\0", f"{path}: not a bulwark record"
    (count,) = struct.unpack_from("<I", data, 12)
    p, sections = 48, {}
    for _ in range(count):
        (nlen,) = struct.unpack_from("<I", data, p)
        name = data[p + 4: p + 4 + nlen].decode()
        p += 4 + nlen
        (dlen,) = struct.unpack_from("<Q", data, p)
        p += 8
        sections[name] = data[p: p + dlen]
        p += dlen
    return sections


def checkpoint_tensors(ckpt_dir, step):
    """{name: numpy array} of a checkpoint's parameters and float buffers."""
    import numpy as np
    sec = read_record(os.path.join(ckpt_dir, f"step-{step:08d}", "rank-0.bin"))
    meta = json.loads(sec["meta"])
    params = np.frombuffer(sec["params"], dtype=np.float32)
    out = {}
    for e in meta["layout"]:
        n = int(np.prod(e["shape"]))
        out[e["name"]] = params[e["offset"]: e["offset"] + n].reshape(e["shape"])
    for k, v in sec.items():
        if k.startswith("buffer:") and (k.endswith(".w0") or k.endswith(".sigma0")):
            out[k[len("buffer:"):]] = np.frombuffer(v, dtype=np.float32)
    return out


def ensure_data(data):
    if not os.path.exists(os.path.join(data, "tokenizer.model")):
        subprocess.run([TRAIN, "prepare", "--corpus", "kjv", "--out", data, "--force"], check=True)
