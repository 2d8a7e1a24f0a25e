"""Throughput of `bulwark-train --config small` against reference.py, in one run.

bulwark-train runs in fp32 and in bf16 (2 threads, its default wait policy).
PyTorch for Python runs the same model the way a good user would: with
OMP_WAIT_POLICY=PASSIVE, at 1 and at 2 threads, in fp32 and under
torch.autocast("cpu", dtype=torch.bfloat16); the best of each is the figure to
beat. Runs are interleaved and repeated, so machine noise hits all alike; each
figure is the median step time over the timed steps of all repeats.

Also: this machine's matmul peak (2048x768 @ 768x768, fp32 and bf16, same
libtorch and oneDNN), the FLOP/s bulwark achieves against the bf16 peak, and
tokens/s of DP=2 and DP=1 x PP=2 (2 ranks of 1 thread each) with the pipeline
bubble (the 1F1B formula, and the share of the step stage 0 spent blocked).

Prints a table and one JSON line (--json writes only the JSON).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
B, T, D, L, F, THREADS = 16, 128, 256, 4, 768, 2
PY = "/usr/bin/python3"  # Debian's python3-torch lives there, whatever else is on PATH


def parse_steps(out, warmup):
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    steps = [j for j in lines if j.get("event") == "step" and j["step"] > warmup]
    start = next(j for j in lines if j.get("event") == "start")
    return steps, start


def bulwark(data, steps, warmup, precision, threads=THREADS):
    cmd = [f"{ROOT}/build/bin/bulwark-train", "--config", "small", "--data", data, "--steps", str(steps + warmup),
           "--eval-every", "0", "--threads", str(threads), "--log-format", "json", "--precision", precision]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    st, start = parse_steps(out, warmup)
    return [j["step_ms"] for j in st], start["shape"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bulwark_multi(data, steps, warmup, precision, extra):
    """2 ranks of 1 thread: step times and (stage-0) waits from rank 0."""
    port = str(free_port())
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        cmd = [f"{ROOT}/build/bin/bulwark-train", "--config", "small", "--data", data, "--steps",
               str(steps + warmup), "--eval-every", "0", "--threads", "1", "--log-format", "json", "--precision",
               precision] + extra
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = [p.communicate() for p in procs]
    for p, (o, e) in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError(f"bulwark-train {extra} failed: {e}")
    st, start = parse_steps(outs[0][0], warmup)
    return st, start


def python(data, steps, warmup, threads, autocast):
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    cmd = [PY, f"{HERE}/reference.py", "--data", data, "--steps", str(steps), "--warmup", str(warmup),
           "--threads", str(threads), "--per-step"] + (["--autocast"] if autocast else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.splitlines()[-1])["step_ms_all"]


def matmul_peak():
    code = (
        "import torch,time,json\n"
        f"torch.set_num_threads({THREADS})\n"
        "res={}\n"
        "for name,dt in (('fp32',torch.float32),('bf16',torch.bfloat16)):\n"
        "  a=torch.randn(2048,768).to(dt);b=torch.randn(768,768).to(dt)\n"
        "  for _ in range(5): a@b\n"
        "  best=0\n"
        "  for _ in range(10):\n"
        "    t=time.perf_counter()\n"
        "    for _ in range(20): a@b\n"
        "    best=max(best,2*2048*768*768*20/(time.perf_counter()-t)/1e9)\n"
        "  res[name]=best\n"
        "print(json.dumps(res))\n")
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    return json.loads(subprocess.run([PY, "-c", code], check=True, capture_output=True, text=True,
                                     env=env).stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=f"{ROOT}/data/kjv")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--micro-batches", type=int, default=4, help="for the DP=1 x PP=2 run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    runs = {k: [] for k in ("bulwark_fp32", "bulwark_bf16", "bulwark_bf16_1t", "python_fp32_1t", "python_fp32_2t",
                            "python_bf16_1t", "python_bf16_2t")}
    multi = {"dp2": [], "dp1_pp2": []}
    pp_wait, bubble = [], None
    shape = ""
    peaks = []
    for r in range(args.repeats):
        ms, shape = bulwark(args.data, args.steps, args.warmup, "fp32")
        runs["bulwark_fp32"] += ms
        runs["bulwark_bf16"] += bulwark(args.data, args.steps, args.warmup, "bf16")[0]
        runs["bulwark_bf16_1t"] += bulwark(args.data, args.steps, args.warmup, "bf16", threads=1)[0]
        for t in (1, 2):
            runs[f"python_fp32_{t}t"] += python(args.data, args.steps, args.warmup, t, False)
            runs[f"python_bf16_{t}t"] += python(args.data, args.steps, args.warmup, t, True)
        st, _ = bulwark_multi(args.data, args.steps, args.warmup, "bf16", [])
        multi["dp2"] += [j["step_ms"] for j in st]
        st, start = bulwark_multi(args.data, args.steps, args.warmup, "bf16",
                                  ["--pp", "2", "--micro-batches", str(args.micro_batches)])
        multi["dp1_pp2"] += [j["step_ms"] for j in st]
        pp_wait += [j["comm_ms"] / j["step_ms"] for j in st]
        bubble = start["bubble_fraction"]
        peaks.append(matmul_peak())
        if not args.json:
            print(f"repeat {r + 1}/{args.repeats}: " + ", ".join(
                f"{k} {statistics.median(v):.0f} ms" for k, v in list(runs.items()) + list(multi.items())),
                file=sys.stderr)
    peak = {k: max(p[k] for p in peaks) for k in ("fp32", "bf16")}

    vocab = int(shape.split("vocab=")[1].split()[0])
    # FLOPs per token for forward + backward: 6 per weight of every matmul
    # (blocks and LM head; the embedding is a lookup), plus attention scores
    # and mixing: 12 * L * T * D (the PaLM appendix estimate, ignoring the mask).
    matmul_params = L * (4 * D * D + 3 * D * F) + vocab * D
    flops_per_token = 6 * matmul_params + 12 * L * T * D
    tokens = B * T
    res = {"bench": "trainer_throughput", "config": "small", "batch": B, "context": T,
           "steps_timed": args.steps * args.repeats, "gflop_per_step": round(flops_per_token * tokens / 1e9, 2),
           "matmul_2048x768x768_gflops": {k: round(v, 1) for k, v in peak.items()}}
    for k, v in runs.items():
        ms = statistics.median(v)
        res[k] = {"step_ms": round(ms, 1), "tokens_per_s": round(tokens / ms * 1000, 1),
                  "gflops": round(flops_per_token * tokens / ms / 1e6, 1)}
    best_py32 = min(("python_fp32_1t", "python_fp32_2t"), key=lambda k: res[k]["step_ms"])
    best_py16 = min(("python_bf16_1t", "python_bf16_2t"), key=lambda k: res[k]["step_ms"])
    res["best_python_fp32"] = best_py32
    res["best_python_bf16"] = best_py16
    best_bw16 = min(("bulwark_bf16", "bulwark_bf16_1t"), key=lambda k: res[k]["step_ms"])
    res["best_bulwark_bf16"] = best_bw16
    res["ratio_bf16_vs_best_python_bf16"] = round(res[best_py16]["step_ms"] / res[best_bw16]["step_ms"], 3)
    res["ratio_fp32_vs_best_python_fp32"] = round(res[best_py32]["step_ms"] / res["bulwark_fp32"]["step_ms"], 3)
    res["ratio_bf16_vs_bulwark_fp32"] = round(res["bulwark_fp32"]["step_ms"] / res["bulwark_bf16"]["step_ms"], 3)
    res["bulwark_bf16_fraction_of_bf16_peak"] = round(res[best_bw16]["gflops"] / peak["bf16"], 3)
    for k, v in multi.items():
        ms = statistics.median(v)
        res[k] = {"step_ms": round(ms, 1), "tokens_per_s": round(2 * tokens / ms * 1000 if k == "dp2" else
                                                                  tokens / ms * 1000, 1)}
    res["dp1_pp2"]["micro_batches"] = args.micro_batches
    res["dp1_pp2"]["bubble_fraction_1f1b"] = round(bubble, 3)
    res["dp1_pp2"]["stage0_blocked_fraction"] = round(statistics.median(pp_wait), 3)
    if not args.json:
        print(f"\ntrainer throughput, small config (B={B}, T={T}), median of {res['steps_timed']} steps each; "
              f"Python with OMP_WAIT_POLICY=PASSIVE")
        print(f"  {'':34s} {'ms/step':>8s} {'tokens/s':>9s} {'GFLOP/s':>8s}")
        labels = [("bulwark_fp32", "bulwark-train fp32, 2 threads"), ("bulwark_bf16", "bulwark-train bf16, 2 threads"),
                  ("bulwark_bf16_1t", "bulwark-train bf16, 1 thread"),
                  ("python_fp32_1t", "PyTorch fp32, 1 thread"), ("python_fp32_2t", "PyTorch fp32, 2 threads"),
                  ("python_bf16_1t", "PyTorch autocast bf16, 1 thread"),
                  ("python_bf16_2t", "PyTorch autocast bf16, 2 threads")]
        for k, label in labels:
            r = res[k]
            print(f"  {label:34s} {r['step_ms']:8.1f} {r['tokens_per_s']:9.0f} {r['gflops']:8.1f}")
        print(f"  best bulwark bf16 ({best_bw16}) / best Python bf16 ({best_py16}): "
              f"{res['ratio_bf16_vs_best_python_bf16']:.2f}x "
              "(target >= 1.3x)")
        print(f"  bulwark fp32 / best Python fp32 ({best_py32}): {res['ratio_fp32_vs_best_python_fp32']:.2f}x")
        print(f"  bulwark bf16 / bulwark fp32: {res['ratio_bf16_vs_bulwark_fp32']:.2f}x")
        print(f"  matmul 2048x768x768: fp32 {peak['fp32']:.0f}, bf16 {peak['bf16']:.0f} GFLOP/s; bulwark bf16 "
              f"achieves {100 * res['bulwark_bf16_fraction_of_bf16_peak']:.0f}% of the bf16 peak (target >= 50%)")
        print(f"  DP=2 (2 ranks x 1 thread, bf16): {res['dp2']['step_ms']:.1f} ms/step, "
              f"{res['dp2']['tokens_per_s']:.0f} tokens/s")
        print(f"  DP=1 x PP=2 ({args.micro_batches} micro-batches, bf16): {res['dp1_pp2']['step_ms']:.1f} ms/step, "
              f"{res['dp1_pp2']['tokens_per_s']:.0f} tokens/s; bubble {res['dp1_pp2']['bubble_fraction_1f1b']:.2f} "
              f"(1F1B), stage 0 blocked {res['dp1_pp2']['stage0_blocked_fraction']:.2f} of its step")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
