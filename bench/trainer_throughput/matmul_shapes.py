"""bf16 matmul throughput for every matmul shape of one small-config step.

Why bulwark-train's achieved FLOP/s sits below the 2048x768x768 peak: its
matmuls are smaller (K = 256 for most) and some read a transposed operand.
Each shape runs alone, as libtorch/oneDNN runs it inside the step; prints
GFLOP/s per shape and the step's matmul time if every call ran at that rate.

  OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/trainer_throughput/matmul_shapes.py [--threads 2]
"""
import argparse
import json
import time

import torch

N, D, F, V, H, T, B, L = 2048, 256, 768, 2048, 4, 128, 16, 4


def rate(f, flops, reps=20):
    for _ in range(3):
        f()
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            f()
        best = min(best, (time.perf_counter() - t) / reps)
    return flops / best / 1e9, best * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    bf = torch.bfloat16
    r = lambda *s: torch.randn(*s).to(bf)
    x, qkv_w, o_w, gu_w, down_w, head_w = r(N, D), r(3 * D, D), r(D, D), r(2 * F, D), r(D, F), r(V, D)
    g_qkv, g_d, g_gu, g_f, g_v = r(N, 3 * D), r(N, D), r(N, 2 * F), r(N, F), r(N, V)
    q, k, a = r(B * H, T, D // H), r(B * H, T, D // H), r(B * H, T, T)
    # (name, fn, flops, calls per step): forward, then the two backward matmuls of each linear.
    lin = lambda xx, w: torch.nn.functional.linear(xx, w)
    shapes = [
        ("qkv fwd 2048x256 @ 256x768", lambda: lin(x, qkv_w), 2 * N * D * 3 * D, L),
        ("qkv dgrad 2048x768 @ 768x256", lambda: g_qkv.mm(qkv_w), 2 * N * D * 3 * D, L),
        ("qkv wgrad 768x2048 @ 2048x256", lambda: g_qkv.t().mm(x), 2 * N * D * 3 * D, L),
        ("wo fwd/dgrad 2048x256 @ 256x256", lambda: lin(x, o_w), 2 * N * D * D, 2 * L),
        ("wo wgrad 256x2048 @ 2048x256", lambda: g_d.t().mm(x), 2 * N * D * D, L),
        ("gate|up fwd 2048x256 @ 256x1536", lambda: lin(x, gu_w), 2 * N * D * 2 * F, L),
        ("gate|up dgrad 2048x1536 @ 1536x256", lambda: g_gu.mm(gu_w), 2 * N * D * 2 * F, L),
        ("gate|up wgrad 1536x2048 @ 2048x256", lambda: g_gu.t().mm(x), 2 * N * D * 2 * F, L),
        ("down fwd 2048x768 @ 768x256", lambda: lin(g_f, down_w), 2 * N * F * D, L),
        ("down dgrad 2048x256 @ 256x768", lambda: g_d.mm(down_w), 2 * N * F * D, L),
        ("down wgrad 256x2048 @ 2048x768", lambda: g_d.t().mm(g_f), 2 * N * F * D, L),
        ("head fwd 2048x256 @ 256x2048", lambda: lin(x, head_w), 2 * N * D * V, 1),
        ("head dgrad 2048x2048 @ 2048x256", lambda: g_v.mm(head_w), 2 * N * D * V, 1),
        ("head wgrad 2048x2048 @ 2048x256", lambda: g_v.t().mm(x), 2 * N * D * V, 1),
        ("scores 64x(128x64 @ 64x128)", lambda: torch.bmm(q, k.transpose(1, 2)), 2 * B * H * T * T * D // H, 3 * L),
        ("mix 64x(128x128 @ 128x64)", lambda: torch.bmm(a, q), 2 * B * H * T * T * D // H, 3 * L),
    ]
    big = r(2048, 768), r(768, 768)
    peak, _ = rate(lambda: big[0] @ big[1], 2 * 2048 * 768 * 768)
    total_ms, total_flops, rows = 0.0, 0, []
    for name, f, flops, calls in shapes:
        g, ms = rate(f, flops)
        total_ms += ms * calls
        total_flops += flops * calls
        rows.append({"shape": name, "gflops": round(g, 1), "ms": round(ms, 3), "calls": calls})
        print(f"  {name:38s} {g:7.1f} GFLOP/s  {ms:6.2f} ms x {calls}")
    print(f"peak 2048x768x768: {peak:.0f} GFLOP/s; the step's matmuls alone: {total_ms:.1f} ms "
          f"= {total_flops / total_ms / 1e6:.0f} GFLOP/s ({100 * total_flops / total_ms / 1e6 / peak:.0f}% of peak)")
    print(json.dumps({"peak_gflops": round(peak, 1), "step_matmul_ms": round(total_ms, 1),
                      "step_matmul_gflops": round(total_flops / total_ms / 1e6, 1), "shapes": rows}))


if __name__ == "__main__":
    main()
