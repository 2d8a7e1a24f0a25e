"""Throughput of `bulwark-train --config small` against reference.py.

Runs are interleaved (bulwark, Python as users run it, Python with
OMP_WAIT_POLICY=PASSIVE) and repeated, so machine noise hits all three alike;
each figure is the median step time over the timed steps of all repeats.
Also measures this machine's matmul peak with the same libtorch and BLAS, and
the GFLOP/s the trainer achieves against it.

Prints a table and one JSON line (--json writes only the JSON).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
B, T, D, L, F, THREADS = 16, 128, 256, 4, 768, 2


def bulwark(data, steps, warmup):
    cmd = [f"{ROOT}/build/bin/bulwark-train", "--config", "small", "--data", data, "--steps", str(steps + warmup),
           "--eval-every", "0", "--threads", str(THREADS), "--log-format", "json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    ms = [j["step_ms"] for j in map(json.loads, out.splitlines()) if j.get("event") == "step" and j["step"] > warmup]
    vocab = next(j for j in map(json.loads, out.splitlines()) if j.get("event") == "start")["shape"]
    return ms, vocab


def python(data, steps, warmup, passive):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    cmd = ["/usr/bin/python3", f"{HERE}/reference.py", "--data", data, "--steps", str(steps), "--warmup",
           str(warmup), "--threads", str(THREADS), "--per-step"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.splitlines()[-1])["step_ms_all"]


def matmul_peak():
    code = (
        "import torch,time\n"
        f"torch.set_num_threads({THREADS})\n"
        "best=0\n"
        "for n in (512,1024):\n"
        "  a=torch.randn(n,n);b=torch.randn(n,n)\n"
        "  for _ in range(3): a@b\n"
        "  for _ in range(5):\n"
        "    t=time.perf_counter()\n"
        "    for _ in range(10): a@b\n"
        "    best=max(best,2*n**3*10/(time.perf_counter()-t)/1e9)\n"
        "print(best)\n")
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    return float(subprocess.run(["/usr/bin/python3", "-c", code], check=True, capture_output=True, text=True,
                                env=env).stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=f"{ROOT}/data/kjv")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    runs = {"bulwark": [], "python": [], "python_passive": []}
    shape = ""
    for r in range(args.repeats):
        ms, shape = bulwark(args.data, args.steps, args.warmup)
        runs["bulwark"] += ms
        runs["python"] += python(args.data, args.steps, args.warmup, passive=False)
        runs["python_passive"] += python(args.data, args.steps, args.warmup, passive=True)
        if not args.json:
            print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(
                f"{k} {statistics.median(v):.0f} ms" for k, v in runs.items()), file=sys.stderr)
    peak = matmul_peak()

    vocab = int(shape.split("vocab=")[1].split()[0])
    # FLOPs per token for forward + backward: 6 per weight of every matmul
    # (blocks and LM head; the embedding is a lookup), plus attention scores
    # and mixing: 12 * L * T * D (the PaLM appendix estimate, ignoring the mask).
    matmul_params = L * (4 * D * D + 3 * D * F) + vocab * D
    flops_per_token = 6 * matmul_params + 12 * L * T * D
    tokens = B * T
    res = {"bench": "trainer_throughput", "config": "small", "batch": B, "context": T, "threads": THREADS,
           "steps_timed": args.steps * args.repeats, "matmul_peak_gflops": round(peak, 1)}
    for k, v in runs.items():
        ms = statistics.median(v)
        res[k] = {"step_ms": round(ms, 1), "tokens_per_s": round(tokens / ms * 1000, 1),
                  "gflops": round(flops_per_token * tokens / ms / 1e6, 1)}
    res["ratio_vs_python"] = round(res["python"]["step_ms"] / res["bulwark"]["step_ms"], 3)
    res["ratio_vs_python_passive"] = round(res["python_passive"]["step_ms"] / res["bulwark"]["step_ms"], 3)
    res["bulwark_fraction_of_peak"] = round(res["bulwark"]["gflops"] / peak, 3)
    if not args.json:
        print(f"\ntrainer throughput, small config (B={B}, T={T}, {THREADS} threads), median of "
              f"{res['steps_timed']} steps each")
        print(f"  {'':28s} {'ms/step':>8s} {'tokens/s':>9s} {'GFLOP/s':>8s}")
        for k, label in [("bulwark", "bulwark-train (C++)"), ("python", "PyTorch/Python, default env"),
                         ("python_passive", "PyTorch/Python, OMP passive")]:
            r = res[k]
            print(f"  {label:28s} {r['step_ms']:8.1f} {r['tokens_per_s']:9.0f} {r['gflops']:8.1f}")
        print(f"  bulwark / Python:            {res['ratio_vs_python']:.2f}x (target >= 1.3x)")
        print(f"  bulwark / Python (passive):  {res['ratio_vs_python_passive']:.2f}x")
        print(f"  matmul peak {peak:.0f} GFLOP/s; bulwark achieves {100 * res['bulwark_fraction_of_peak']:.0f}% of it")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
