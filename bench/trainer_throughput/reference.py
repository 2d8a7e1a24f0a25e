"""The small bulwark model written in PyTorch for Python: the reference that
bench/trainer_throughput compares bulwark-train against.

Same architecture (LLaMA-style: RMSNorm, RoPE, causal attention, SwiGLU,
untied head), same batch, context, threads, data and optimizer settings as
`bulwark-train --config small`. Written the way a PyTorch user would write it
(eager mode; torch 1.13 has no fused attention), timed over the same steps.

On a GPU (--device cuda, bench/trainer_throughput/gpu.sh) it is the peer at
its best settings: bf16 autocast, fused AdamW, --sdpa
(F.scaled_dot_product_attention, flash attention) and --compile
(torch.compile), at any shape (--d-model, --layers, --heads, --ffn,
--vocab, --context, --batch-size).

Prints one JSON line: {"tokens_per_s": ..., "step_ms": ..., "params": ...}.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from bulwark_bench import read_record  # noqa: E402


def read_tokens(path):
    """Tokens and vocabulary size of a bulwark token shard."""
    sec = read_record(path)
    return np.frombuffer(sec["tokens"], dtype=np.uint16), json.loads(sec["meta"])["vocab_size"]


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(T, D, base=10000.0):
    inv = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().float(), ang.sin().float()


def apply_rope(x, cos, sin):
    T, half = x.size(2), x.size(3) // 2
    c, s = cos[:T], sin[:T]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)


class Block(nn.Module):
    def __init__(self, d, h, f):
        super().__init__()
        self.h = h
        self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False)
        self.down = nn.Linear(f, d, bias=False)

    sdpa = False  # F.scaled_dot_product_attention (torch 2.x) instead of the explicit softmax

    def attention(self, x, cos, sin):
        B, T, C = x.shape
        heads = lambda t: t.view(B, T, self.h, C // self.h).transpose(1, 2)
        q = apply_rope(heads(self.wq(x)), cos, sin)
        k = apply_rope(heads(self.wk(x)), cos, sin)
        v = heads(self.wv(x))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.h))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            y = att @ v
        return self.wo(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attn_norm(x), cos, sin)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Transformer(nn.Module):
    def __init__(self, V, d, L, h, f, T):
        super().__init__()
        self.tok_emb = nn.Embedding(V, d)
        self.blocks = nn.ModuleList(Block(d, h, f) for _ in range(L))
        self.final_norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, V, bias=False)
        cos, sin = rope_tables(T, d // h)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        x = self.tok_emb(idx)
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        logits = self.lm_head(self.final_norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--per-step", action="store_true", help="also print every timed step's ms")
    ap.add_argument("--autocast", action="store_true",
                    help="forward under torch.autocast(DEVICE, dtype=torch.bfloat16), as PyTorch recommends for bf16")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--sdpa", action="store_true", help="F.scaled_dot_product_attention (torch 2.x)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (torch 2.x)")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=0, help="0: the data's tokenizer")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(1337)
    tokens, vocab = read_tokens(f"{args.data}/train-000.bin")
    vocab = max(vocab, args.vocab)
    B, T = args.batch_size, args.context
    dev = torch.device(args.device)
    Block.sdpa = args.sdpa
    model = Transformer(vocab, args.d_model, args.layers, args.heads, args.ffn, T).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    fused = {"fused": True} if dev.type == "cuda" else {}
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=2e-3, betas=(0.9, 0.95), eps=1e-8, **fused)
    step_model = torch.compile(model) if args.compile else model
    rng = np.random.default_rng(0)
    n_samples = (len(tokens) - 1) // T

    def batch():
        starts = rng.integers(0, n_samples, B) * T
        x = np.stack([tokens[s : s + T] for s in starts]).astype(np.int64)
        y = np.stack([tokens[s + 1 : s + T + 1] for s in starts]).astype(np.int64)
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        if dev.type == "cuda":
            x, y = x.pin_memory().to(dev, non_blocking=True), y.pin_memory().to(dev, non_blocking=True)
        return x, y

    times, losses = [], []
    for step in range(args.warmup + args.steps):
        x, y = batch()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.autocast):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())  # the step's one wait for the device, as bulwark-train's
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    ms = 1000 * float(np.median(times))
    res = {"tokens_per_s": B * T / (ms / 1000), "step_ms": ms,
           "params": sum(p.numel() for p in model.parameters()), "torch": torch.__version__,
           "autocast": args.autocast, "threads": args.threads, "device": args.device, "sdpa": args.sdpa,
           "compile": args.compile, "vocab": vocab, "first_loss": losses[0], "last_loss": losses[-1]}
    if args.per_step:
        res["step_ms_all"] = [1000 * t for t in times]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
