"""bench/poet_orthogonality: how orthogonal POET's rotations stay in real
training, against the number of Cayley-Neumann terms k = 1..5.

Each arm trains the small config with POET-BS (b=64) for two merge periods,
logging diagnostics every few steps: the worst ||R R^T - I||_F / sqrt(m) over
all layers and sides (a sawtooth that resets at each merge), the spectrum
drift after the merges, and the final training loss. Writes
results/orthogonality.csv and results/orthogonality.png.

The reference notes predict a parity effect: even k leaves an error of order
|Q|^(2k+2), odd k about 2|Q|^(k+1), so k=2 should beat the paper's k=3.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(bb.ROOT, "data", "kjv"))
    ap.add_argument("--merge-every", type=int, default=100)
    ap.add_argument("--periods", type=int, default=2)
    ap.add_argument("--diag-every", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    bb.ensure_data(args.data)
    os.makedirs(args.out, exist_ok=True)
    steps = args.merge_every * args.periods

    def run(k):
        r = bb.train(["--config", "small", "--data", args.data, "--steps", str(steps), "--eval-every", "0",
                      "--threads", str(args.threads), "--optimizer", "poet", "--poet-block-size", "64",
                      "--poet-merge-every", str(args.merge_every), "--poet-neumann-terms", str(k),
                      "--poet-diag-every", str(args.diag_every), "--log-every", "10"])
        print(f"k={k}: done", file=sys.stderr)
        return k, r

    with ThreadPoolExecutor(args.jobs) as pool:
        runs = dict(pool.map(run, range(1, 6)))

    rows, summary = [], {}
    for k, r in runs.items():
        diag = r.of("poet_diag")
        for d in diag:
            rows.append({"k": k, "step": d["step"], "max_orth_error": d["max_orth_error"],
                         "max_spectrum_drift": d["max_spectrum_drift"]})
        # Just before a merge the error is at its peak; at a merge step it is 0.
        before_merge = [d["max_orth_error"] for d in diag if d["step"] % args.merge_every != 0]
        summary[k] = {"peak_orth_error": max(before_merge), "final_spectrum_drift": diag[-1]["max_spectrum_drift"],
                      "final_loss": r.of("done")[0]["loss"]}
    with open(os.path.join(args.out, "orthogonality.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["k", "step", "max_orth_error", "max_spectrum_drift"])
        w.writeheader()
        w.writerows(rows)

    print(f"\nPOET-BS b=64, small config, {steps} steps, merge every {args.merge_every}")
    print(f"  {'k':>2s} {'peak orth error':>16s} {'spectrum drift':>15s} {'final loss':>11s}")
    for k, s in summary.items():
        print(f"  {k:2d} {s['peak_orth_error']:16.3e} {s['final_spectrum_drift']:15.3e} {s['final_loss']:11.4f}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    for k in runs:
        pts = [(x["step"], x["max_orth_error"]) for x in rows if x["k"] == k and x["max_orth_error"] > 0]
        ax.semilogy([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=f"k={k}")
    ax.set_xlabel("step")
    ax.set_ylabel("max over layers of ||R R^T - I||_F / sqrt(m)")
    ax.set_title("POET-BS b=64: orthogonality error vs Neumann terms (merges reset it)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "orthogonality.png"), dpi=110)
    print(json.dumps({"bench": "poet_orthogonality", "summary": summary}))


if __name__ == "__main__":
    main()
