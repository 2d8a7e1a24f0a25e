"""Helpers of gpu.sh: one result line per run, and the closing table.

  gpu_summary.py bulwark NAME WARMUP SHAPE < bulwark-train's json log
  gpu_summary.py reference NAME SHAPE < reference.py's output
      -> one JSON line: tokens/s, ms/step (median over the steps after
         WARMUP), TFLOP/s and MFU, first and last loss.
  gpu_summary.py table RESULTS.jsonl
      -> the table gpu.sh prints last.

SHAPE is "d,layers,heads,ffn,context,batch,vocab". FLOPs per token:
6 x (matrix parameters: blocks and LM head) + 12 x layers x d x context,
the count ../shared/reference/gpu.md uses; MFU against the H100's dense bf16
peak of 989 TFLOP/s, for fp32 runs too (so the columns compare).
"""
import json
import statistics
import sys

PEAK = 989e12


def flops_per_token(shape):
    d, layers, heads, ffn, ctx, batch, vocab = shape
    return 6 * (layers * (4 * d * d + 3 * d * ffn) + vocab * d) + 12 * layers * d * ctx


def parse_shape(text):
    return [int(x) for x in text.split(",")]


def emit(name, shape, ms, first, last, extra):
    d, layers, heads, ffn, ctx, batch, vocab = shape
    tokens = batch * ctx
    tps = tokens / ms * 1000
    tflops = flops_per_token(shape) * tps / 1e12
    res = {"name": name, "ms_per_step": round(ms, 2), "tokens_per_s": round(tps), "tflops": round(tflops, 1),
           "mfu": round(tflops * 1e12 / PEAK, 4), "first_loss": first, "last_loss": last}
    res.update(extra)
    print(json.dumps(res))


def bulwark(name, warmup, shape):
    lines = []
    for raw in sys.stdin:
        if raw.startswith("{"):
            try:
                lines.append(json.loads(raw))
            except ValueError:
                pass
    steps = [j for j in lines if j.get("event") == "step"]
    timed = [j["step_ms"] for j in steps if j["step"] > warmup]
    if not timed:
        print(json.dumps({"name": name, "error": "no timed steps"}))
        return
    start = next((j for j in lines if j.get("event") == "start"), {})
    emit(name, shape, statistics.median(timed), steps[0].get("loss"), steps[-1].get("loss"),
         {"steps_timed": len(timed), "params": start.get("params"), "device": start.get("device"),
          "precision": start.get("precision"),
          "forward_ms": round(statistics.median(j["forward_ms"] for j in steps if j["step"] > warmup), 2),
          "backward_ms": round(statistics.median(j["backward_ms"] for j in steps if j["step"] > warmup), 2),
          "reduce_ms": round(statistics.median(j["comm_ms"] for j in steps if j["step"] > warmup), 2),
          "optimizer_ms": round(statistics.median(j["optimizer_ms"] for j in steps if j["step"] > warmup), 2)})


def reference(name, shape):
    out = [x for x in sys.stdin.read().splitlines() if x.startswith("{")]
    if not out:
        print(json.dumps({"name": name, "error": "no result line"}))
        return
    r = json.loads(out[-1])
    emit(name, shape, r["step_ms"], r.get("first_loss"), r.get("last_loss"),
         {"params": r.get("params"), "torch": r.get("torch")})


def table(path):
    rows = [json.loads(x) for x in open(path) if x.strip()]
    print(f"{'run':44s} {'ms/step':>8s} {'tokens/s':>10s} {'TFLOP/s':>8s} {'MFU':>6s}  loss first -> last")
    by = {}
    for r in rows:
        by[r["name"]] = r
        if "error" in r:
            print(f"{r['name']:44s} {r['error']}")
            continue
        first = f"{r['first_loss']:.3f}" if isinstance(r.get("first_loss"), (int, float)) else "?"
        last = f"{r['last_loss']:.3f}" if isinstance(r.get("last_loss"), (int, float)) else "?"
        print(f"{r['name']:44s} {r['ms_per_step']:8.2f} {r['tokens_per_s']:10d} {r['tflops']:8.1f} "
              f"{100 * r['mfu']:5.1f}%  {first} -> {last}")
    for shape in ("small", "88m"):
        for prec in ("bf16", "fp32"):
            b = by.get(f"bulwark {shape} {prec}")
            for peer in (f"pytorch {shape} {prec} compile+sdpa", f"pytorch {shape} {prec} eager+sdpa"):
                p = by.get(peer)
                if b and p and "error" not in b and "error" not in p:
                    print(f"  bulwark {shape} {prec} / {peer}: {b['tokens_per_s'] / p['tokens_per_s']:.2f}x")
        b16, b32 = by.get(f"bulwark {shape} bf16"), by.get(f"bulwark {shape} fp32")
        if b16 and b32 and "error" not in b16 and "error" not in b32:
            print(f"  bulwark {shape}: bf16 / fp32 {b16['tokens_per_s'] / b32['tokens_per_s']:.2f}x")


def main():
    mode = sys.argv[1]
    if mode == "bulwark":
        bulwark(sys.argv[2], int(sys.argv[3]), parse_shape(sys.argv[4]))
    elif mode == "reference":
        reference(sys.argv[2], parse_shape(sys.argv[3]))
    else:
        table(sys.argv[2])


if __name__ == "__main__":
    main()
