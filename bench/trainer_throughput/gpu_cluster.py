#!/usr/bin/env python3
"""A CUDA job on a local cluster through a kill and a machine-down (issue 41).

On the GPU machine, after scripts/gpu-build.sh --build, with the kit's
control plane on PATH (source build-gpu-kit/env.sh):

    python3 bench/trainer_throughput/gpu_cluster.py --train build-gpu/bin/bulwark-train \
        --data build-gpu-kit/data/kjv --out $OUT

2 machines + 1 standby on the host's network (--no-netns), a 2-rank job of
the small shape on the one GPU (both ranks share it), bf16, in-memory
checkpoints on. It kills m01's rank, then takes m02 down GAP seconds after
the kill (the issue's 12 s), and waits for the standby to train in m02's
slot. It prints each incident (detection, decision -> first step, lost
steps, where the state came from), each rank's restart path and phases
(the trainer's `start` events), and whether the job was ever stopped.
It also times a CUDA rank's cold start: process start -> first step.
Every wait polls `bulwark status --json` against a deadline.

--elastic runs the job as elastic data parallelism instead (`recovery:
{mode: elastic}`, --elastic-replicas 2, the ring): after each fault the
survivor trains on alone at width 1, and the lost replica rejoins from it.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

SMALL = ["--d-model", "256", "--n-layers", "4", "--n-heads", "4", "--ffn", "768", "--context", "128",
         "--batch-size", "16", "--vocab-size", "2048"]


def log(out, line):
    print(line, flush=True)
    with open(os.path.join(out, "cluster.txt"), "a") as f:
        f.write(line + "\n")


class Cluster:
    def __init__(self, root, out):
        self.dir = os.path.join(root, "cluster")
        self.out = out

    def bw(self, *args, timeout=60, check=True):
        r = subprocess.run(["bulwark", *args, "--dir", self.dir], capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"bulwark {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()[-400:]}")
        return r

    def query(self, what):
        r = self.bw(what, "--json", timeout=15, check=False)
        try:
            return json.loads(r.stdout) if r.returncode == 0 else None
        except json.JSONDecodeError:
            return None

    def wait(self, what, seconds, pred):
        deadline = time.time() + seconds
        s = None
        while time.time() < deadline:
            s = self.query("status")
            if s and s.get("job") and pred(s):
                return s
            time.sleep(0.25)
        raise TimeoutError(f"timed out after {seconds} s waiting for {what}; last status: {json.dumps(s)[:1500]}")


def stopped(s):
    return s["job"].get("state") in ("stopped", "failed")


def cold_start(train, data, device, out):
    """Process start -> first step of a rank, alone (no agent)."""
    t0 = time.time()
    p = subprocess.Popen([train, "--data", data, *device, *SMALL, "--steps", "5",
                          "--eval-every", "0", "--log-format", "json", "--memory-ckpt", "off", "--threads", "4"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = None
    start = None
    for line in p.stdout:
        if '"event":"start"' in line.replace(" ", ""):
            start = json.loads(line)
        if '"event":"step"' in line.replace(" ", "") and first is None:
            first = time.time() - t0
    p.wait()
    if first is None:
        log(out, f"cold start: no step (exit {p.returncode}): {p.stderr.read()[-300:]}")
        return
    phases = ", ".join(f"{k[:-3]} {start.get(k, 0) / 1000:.2f} s" for k in ("data_ms", "init_ms")) if start else "?"
    log(out, f"cold start of a rank, {' '.join(device)} (process start -> first step done): {first:.2f} s ({phases})")


def rank_events(cluster, kind):
    """(machine, log name, events of `kind`) for every rank log, in order."""
    for path in sorted(glob.glob(os.path.join(cluster.dir, "machines", "*", "ranks", "*"))):
        if not os.path.isfile(path):
            continue
        events = []
        with open(path, errors="replace") as f:
            for line in f:
                if f'"event":"{kind}"' not in line.replace(" ", ""):
                    continue
                try:
                    events.append(json.loads(line[line.index("{"):]))
                except (ValueError, json.JSONDecodeError):
                    continue
        yield path.split(os.sep)[-3], os.path.basename(path), events


def rank_starts(cluster):
    """Every rank log's start events: path and phases."""
    return [f"  {machine} {log_name}: path {e.get('path')}, start step {e.get('start_step')}, "
            f"assign wait {e.get('assign_wait_ms', 0):.0f} ms, rendezvous {e.get('rendezvous_ms', 0):.0f} ms, "
            f"init {e.get('init_ms', 0):.0f} ms, checkpoint load {e.get('checkpoint_load_ms', 0):.0f} ms"
            for machine, log_name, events in rank_events(cluster, "start") for e in events]


def step_costs(cluster, lo, hi):
    """Medians over steps lo..hi of each rank log: step time and what the
    in-memory checkpoint cost it (the rank blocked on the copy; the copy's
    CPU time on its own thread)."""
    rows = []
    for machine, log_name, events in rank_events(cluster, "step"):
        steps = [e for e in events if lo <= e.get("step", -1) <= hi]
        if not steps:
            continue

        def med(k):
            v = sorted(x.get(k, 0.0) for x in steps)
            return v[len(v) // 2]
        rows.append(f"  {machine} {log_name}: steps {lo}-{hi} ({len(steps)}): step "
                    f"{med('step_ms'):.2f} ms (comm {med('comm_ms'):.2f}), blocked on the checkpoint copy "
                    f"{med('ckpt_block_ms'):.2f} ms, copy CPU {med('ckpt_copy_cpu_ms'):.2f} ms")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", default="/tmp/gpu-cluster")
    ap.add_argument("--gap", type=float, default=12.0, help="seconds from the kill to the machine-down")
    ap.add_argument("--device", default="cuda", help="cpu: the same run on a host without a GPU")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--first", type=int, default=100, help="steps before the kill")
    ap.add_argument("--elastic", action="store_true", help="an elastic job (two replicas on the ring)")
    a = ap.parse_args()
    device = ["--device", a.device, "--precision", a.precision]
    os.makedirs(a.out, exist_ok=True)
    train = os.path.abspath(a.train)
    data = os.path.abspath(a.data)
    root = "/tmp/bw-gpu-cluster"
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)

    cold_start(train, data, device, a.out)

    c = Cluster(root, a.out)
    with open(os.path.join(root, "job.yaml"), "w") as f:
        args = ["--data", data, *device, *SMALL, "--steps", "1000000",
                "--eval-every", "0", "--log-format", "json", "--ckpt-dir", root + "/ckpt", "--ckpt-every", "1000",
                "--resume", "--threads", "4", "--dist-timeout", "10", "--memory-ckpt", "on"]
        if a.elastic:
            args += ["--elastic-replicas", "2"]
        f.write("name: gpu\nworld_size: 2\n")
        if a.elastic:
            f.write("recovery: {mode: elastic}\n")
        f.write("command: [" + json.dumps(train) + "]\n")
        f.write("args: [" + ", ".join(json.dumps(x) for x in args) + "]\n")
        f.write("env: {OMP_NUM_THREADS: '4'}\n")
    ok = False
    try:
        c.bw("up", "--machines", "2", "--standby", "1", "--no-netns", timeout=120)
        t_submit = time.time()
        c.bw("submit", os.path.join(root, "job.yaml"))
        s = c.wait("the first steps", 90, lambda s: stopped(s) or s["job"].get("last_step", 0) >= a.first)
        if stopped(s):
            raise RuntimeError(f"the job stopped before step {a.first}: {json.dumps(s['job'])[:800]}")
        log(a.out, f"submitted -> step {a.first}: {time.time() - t_submit:.1f} s; placement {s['job'].get('placement')}")

        at_kill = s["job"]["last_step"]
        for row in step_costs(c, a.first // 2, at_kill):
            log(a.out, row)
        c.bw("inject", "kill", "--machine", "m01")
        t_kill = time.time()
        s = c.wait("a step after the kill", 60, lambda s: stopped(s) or s["job"].get("last_step", 0) > at_kill + 5)
        log(a.out, f"kill of m01's rank at step {at_kill}: training again {time.time() - t_kill:.1f} s after it")
        time.sleep(max(0.0, a.gap - (time.time() - t_kill)))  # the scenario's spacing, not a wait for a condition
        at_down = c.query("status")["job"].get("last_step", 0)
        c.bw("inject", "machine-down", "--machine", "m02")
        t_down = time.time()
        s = c.wait("the standby in m02's slot, training", 100,
                   lambda s: stopped(s) or (s["job"].get("state") == "running" and "m02" not in s["job"].get("placement", [])
                                            and s["job"].get("last_step", 0) > at_down + a.first // 5))
        log(a.out, f"machine-down of m02 at step {at_down} ({t_down - t_kill:.1f} s after the kill): training on "
                   f"{s['job'].get('placement')} {time.time() - t_down:.1f} s after it")
        ok = not stopped(s)
    except Exception as e:  # noqa: BLE001: everything below still runs
        log(a.out, f"FAILED: {e}")
    finally:
        s = c.query("status")
        incidents = c.query("incidents") or []
        with open(os.path.join(a.out, "incidents.json"), "w") as f:
            json.dump(incidents, f, indent=1)
        for i in incidents:
            log(a.out, f"incident {i.get('id')}: {i.get('summary', '')[:160]}")
            log(a.out, f"  detect {i.get('detect_s')} s, decision -> first step {i.get('recover_s')} s, lost steps "
                       f"{i.get('lost_steps')}, restored step {i.get('restored_step')} from {i.get('restore_source')} "
                       f"in {i.get('restore_ms')} ms, resolution {i.get('resolution')}")
        for row in rank_starts(c):
            log(a.out, row)
        if s and s.get("job"):
            log(a.out, f"job: state {s['job'].get('state')}, last step {s['job'].get('last_step')}, placement "
                       f"{s['job'].get('placement')}; machines " +
                ", ".join(f"{m['id']} {m['state']}" for m in s.get("machines", [])))
        never_stopped = ok and all("crash loop" not in i.get("summary", "") and "deterministic" not in i.get("summary", "")
                                   for i in incidents)
        log(a.out, "RESULT: " + ("the job trained on through both faults, never stopped" if never_stopped
                                 else "the job did not come through (above)"))
        c.bw("down", timeout=60, check=False)
        # One file for the logs: the device tool brings back at most 8.
        with tarfile.open(os.path.join(a.out, "cluster-logs.tar.gz"), "w:gz") as tar:
            for path in glob.glob(os.path.join(c.dir, "*.log")) + glob.glob(os.path.join(c.dir, "machines", "*", "*.log")) + \
                    glob.glob(os.path.join(c.dir, "machines", "*", "ranks", "*")):
                if os.path.isfile(path):
                    tar.add(path, arcname=os.path.relpath(path, c.dir))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
