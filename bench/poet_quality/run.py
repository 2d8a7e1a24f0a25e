"""bench/poet_quality: validation loss at equal tokens for AdamW and POET.

Arms (same seed, data order and token budget, the small config):
  adamw-standard    AdamW, N(0, 0.02) init
  adamw-normalized  AdamW, normalized-Gaussian init of the block linears
                    (separates POET's init from POET itself)
  poet-bs64, poet-bs128, poet-fs0.5
Writes results/curves.csv, results/curves.png and results/spectrum.png (the
singular values of one layer under AdamW and POET, from checkpoints taken at
a merge step, where POET's weight is exactly its W0), and prints who leads
at each evaluation.
"""
import argparse
import csv
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import bulwark_bench as bb  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ARMS = [
    ("adamw-standard", []),
    ("adamw-normalized", ["--init", "normalized"]),
    ("poet-bs64", ["--optimizer", "poet", "--poet-block-size", "64"]),
    ("poet-bs128", ["--optimizer", "poet", "--poet-block-size", "128"]),
    ("poet-fs0.5", ["--optimizer", "poet", "--poet-variant", "fs", "--poet-fs-fraction", "0.5"]),
]
LAYER = "blocks.1.mlp.gate"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(bb.ROOT, "data", "kjv"))
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--merge-every", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=2, help="arms run at once")
    ap.add_argument("--threads", type=int, default=1, help="threads per arm")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    bb.ensure_data(args.data)
    os.makedirs(args.out, exist_ok=True)
    ckpt_root = os.path.join(args.out, "ckpt")

    def run(arm):
        name, extra = arm
        run = bb.train(["--config", "small", "--data", args.data, "--steps", str(args.steps),
                        "--eval-every", str(args.eval_every), "--eval-batches", "16",
                        "--threads", str(args.threads), "--poet-merge-every", str(args.merge_every),
                        "--ckpt-dir", os.path.join(ckpt_root, name), "--ckpt-every", str(args.steps),
                        "--ckpt-keep", "1", "--log-every", "50"] + extra)
        print(f"{name}: done", file=sys.stderr)
        return name, run

    with ThreadPoolExecutor(args.jobs) as pool:
        runs = dict(pool.map(run, ARMS))

    tokens_per_step = 16 * 128
    evals = {n: {e["step"]: e["val_loss"] for e in r.of("eval")} for n, r in runs.items()}
    steps = sorted(evals[ARMS[0][0]])
    with open(os.path.join(args.out, "curves.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "tokens"] + [n for n, _ in ARMS])
        for s in steps:
            w.writerow([s, s * tokens_per_step] + [f"{evals[n][s]:.4f}" for n, _ in ARMS])

    print(f"\nvalidation loss at equal tokens (small config, {args.steps} steps, merge every {args.merge_every})")
    print(f"  {'tokens':>9s} " + " ".join(f"{n:>17s}" for n, _ in ARMS) + "   leader")
    leaders = {}
    for s in steps:
        row = {n: evals[n][s] for n, _ in ARMS}
        lead = min(row, key=row.get)
        leaders[s] = lead
        print(f"  {s * tokens_per_step:9d} " + " ".join(f"{row[n]:17.4f}" for n, _ in ARMS) + f"   {lead}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 5))
    for n, _ in ARMS:
        xs = [s * tokens_per_step / 1e6 for s in steps if s > 0]
        ax.plot(xs, [evals[n][s] for s in steps if s > 0], marker="o", ms=3, label=n)
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("validation loss")
    ax.set_title("bulwark-train, small config on KJV: AdamW vs POET")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "curves.png"), dpi=110)

    # Spectrum of one layer: POET keeps W0's singular values, AdamW moves them.
    fig, ax = plt.subplots(figsize=(8, 5))
    spectra = {}
    for n, _ in ARMS:
        if n not in ("adamw-standard", "adamw-normalized", "poet-bs64"):
            continue
        t = bb.checkpoint_tensors(os.path.join(ckpt_root, n), args.steps)
        w = t.get(LAYER + ".weight")
        if w is None:
            w = t[LAYER + ".poet.w0"].reshape(768, 256)
        spectra[n] = np.linalg.svd(w.astype(np.float64), compute_uv=False)
        ax.plot(spectra[n], label=f"{n}, step {args.steps}")
        if n == "poet-bs64":  # W0 at init: the normalized init both POET and adamw-normalized start from
            ax.plot(t[LAYER + ".poet.sigma0"], "k--", lw=1, label="normalized init (POET's W0 at step 0)")
    ax.set_xlabel("index")
    ax.set_ylabel("singular value")
    ax.set_title(f"singular values of {LAYER} (768 x 256)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "spectrum.png"), dpi=110)

    res = {"bench": "poet_quality", "steps": args.steps, "merge_every": args.merge_every,
           "final": {n: evals[n][steps[-1]] for n, _ in ARMS}, "leader_by_step": leaders,
           "sigma_max": {n: float(s[0]) for n, s in spectra.items()},
           "sigma_min": {n: float(s[-1]) for n, s in spectra.items()}}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
