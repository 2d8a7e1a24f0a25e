"""bench/poet_cost: step time and peak memory of POET against AdamW at the
small config, measured in one run.

Arms are interleaved and repeated so that machine noise hits them alike; the
figure per arm is the median step time over all timed steps. Peak memory is
each process's maximum resident set (wait4), which includes libtorch itself.
Target: POET step time at most 1.5x AdamW's.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bulwark_bench as bb  # noqa: E402

ARMS = [
    ("adamw", []),
    ("poet-bs64", ["--optimizer", "poet", "--poet-block-size", "64"]),
    ("poet-bs64-activations", ["--optimizer", "poet", "--poet-block-size", "64", "--poet-apply", "activations"]),
    ("poet-fs0.5", ["--optimizer", "poet", "--poet-variant", "fs", "--poet-fs-fraction", "0.5"]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(bb.ROOT, "data", "kjv"))
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    bb.ensure_data(args.data)

    ms = {name: [] for name, _ in ARMS}
    rss = {name: 0.0 for name, _ in ARMS}
    for r in range(args.repeats):
        for name, extra in ARMS:
            run = bb.train(["--config", "small", "--data", args.data, "--steps", str(args.steps + args.warmup),
                            "--eval-every", "0", "--threads", "2"] + extra)
            ms[name] += [e["step_ms"] for e in run.of("step") if e["step"] > args.warmup]
            rss[name] = max(rss[name], run.peak_rss_mb)
        print(f"repeat {r + 1}/{args.repeats}: " +
              ", ".join(f"{n} {statistics.median(v):.0f} ms" for n, v in ms.items()), file=sys.stderr)

    base = statistics.median(ms["adamw"])
    res = {"bench": "poet_cost", "config": "small", "steps_timed": args.steps * args.repeats, "arms": {}}
    print(f"\nPOET cost at the small config (B=16, T=128, 2 threads), median of {args.steps * args.repeats} steps")
    print(f"  {'arm':24s} {'ms/step':>8s} {'x AdamW':>8s} {'peak RSS MB':>12s}")
    for name, _ in ARMS:
        m = statistics.median(ms[name])
        res["arms"][name] = {"step_ms": round(m, 1), "ratio": round(m / base, 3), "peak_rss_mb": round(rss[name], 1)}
        print(f"  {name:24s} {m:8.1f} {m / base:8.2f} {rss[name]:12.0f}")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
