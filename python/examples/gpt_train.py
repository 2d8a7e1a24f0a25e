#!/usr/bin/env python3
"""A small GPT in plain PyTorch, trained with DDP over Gloo on CPU: the kind
of script bulwark protects, with the client in a few lines (marked CLIENT).

    bulwark run --machines 2 --standby 1 -- .venv/bin/python python/examples/gpt_train.py --steps 300

It learns this file's own text, one character at a time. Each step it
reports its loss to bulwark and checkpoints the model and the optimizer
into its agent's memory. After a restart it resumes from the newest step
every rank has a checkpoint of (its own, or a peer's backup copy), so a
killed rank or a dead machine costs at most one step. At --steps every rank exits 0 and the job is complete.

bulwark.run(generation, ...) keeps the process across restarts: when a
peer dies, this rank ends its process group, waits for its agent to hand it
the next generation, and calls generation() again, with torch imported and
the data read (a warm restart, python/bulwark/generations.py). A killed
rank's slot is taken by a spare the agent started ahead of need.
Run directly, without bulwark, the client calls do nothing: pass --init
file:///tmp/somefile --rank R --world-size N.

With --elastic-replicas N the survivors of a lost replica keep training
(python/bulwark/elastic.py; submit with recovery: {mode: elastic}): no DDP
and no process group, each step N x --micro-batches micro-batches spread
over the ranks there are, the gradient summed exactly, so a run that lost
replicas ends on the fault-free run's bits. Alone, one process computes
them all: that is the reference run.
"""

import argparse
import hashlib
import json
import math
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bulwark  # noqa: E402  CLIENT

BLOCK, BATCH, DIM, HEADS, LAYERS = 32, 16, 64, 4, 2


class GPT(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.tok = nn.Embedding(vocab, DIM)
        self.pos = nn.Parameter(torch.zeros(1, BLOCK, DIM))
        layer = nn.TransformerEncoderLayer(DIM, HEADS, 4 * DIM, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, vocab, bias=False)
        # Each position sees itself and what came before.
        self.register_buffer("causal", torch.triu(torch.full((BLOCK, BLOCK), float("-inf")), diagonal=1))

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, : idx.shape[1]]
        x = self.blocks(x, mask=self.causal[: idx.shape[1], : idx.shape[1]])
        return self.head(self.norm(x))


def batch(data, step, rank):
    """Sequences drawn by (step, rank): a resumed run sees the same data."""
    g = torch.Generator().manual_seed(step * 1000 + rank)
    starts = torch.randint(0, len(data) - BLOCK - 1, (BATCH,), generator=g)
    x = torch.stack([data[s: s + BLOCK] for s in starts])
    y = torch.stack([data[s + 1: s + BLOCK + 1] for s in starts])
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--init", default="env://")
    ap.add_argument("--cold", action="store_true",
                    help="no bulwark.run: each restart is a new process (for the comparison in bench/python)")
    ap.add_argument("--rank", type=int, default=None, help="default: $RANK (env://)")
    ap.add_argument("--world-size", type=int, default=None, help="default: $WORLD_SIZE (env://)")
    ap.add_argument("--elastic-replicas", type=int, default=0,
                    help="N: elastic data parallelism over N replicas (bulwark.elastic)")
    ap.add_argument("--micro-batches", type=int, default=1, help="micro-batches per replica and step (elastic)")
    ap.add_argument("--float-sum", action="store_true", help="elastic: sum float32 gradients, not the exact sum")
    a = ap.parse_args()
    torch.set_num_threads(1)
    text = open(os.path.abspath(__file__), encoding="utf-8").read()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    if a.elastic_replicas:
        train_elastic(a, chars, data)
        return
    if a.cold:
        with bulwark.peer_loss_exits():  # a lost peer is its fault, not this machine's
            generation(a, chars, data)
        return
    bulwark.run(generation, a, chars, data)  # CLIENT: a restart keeps this process


def generation(a, chars, data):
    """One generation of the job: form the group (RANK, WORLD_SIZE and
    MASTER_* come from the environment, new each generation), train, leave."""
    ranks = {} if a.rank is None else {"rank": a.rank, "world_size": a.world_size}
    dist.init_process_group("gloo", init_method=a.init, **ranks)
    train(a, chars, data)
    dist.destroy_process_group()


def train(a, chars, data):
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial weights on every rank
    model = GPT(len(chars))
    ddp = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)

    step = 0
    resumed = bulwark.restore()  # CLIENT: the newest step every rank has a checkpoint of
    if resumed is not None:
        model.load_state_dict(resumed.state["model"])
        opt.load_state_dict(resumed.state["optimizer"])
        step = resumed.step
        if rank == 0:
            print("resumed after step %d" % step, flush=True)

    while step < a.steps:
        step += 1
        x, y = batch(data, step, rank)
        logits = ddp(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and (step % 10 == 0 or step == a.steps):
            print("step %d loss %.4f (perplexity %.1f)" % (step, loss.item(), math.exp(loss.item())), flush=True)
        bulwark.save(step, {"model": model.state_dict(), "optimizer": opt.state_dict()})  # CLIENT
        bulwark.step(step, loss=loss.item())  # CLIENT: progress; compute time is measured for it


def train_elastic(a, chars, data):
    """Survivors keep training: the loop of bulwark.elastic (its top comment)."""
    import bulwark.elastic  # CLIENT
    torch.manual_seed(0)  # the same initial weights on every rank
    model = GPT(len(chars))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    rep = bulwark.elastic.Replicas(model, opt, replicas=a.elastic_replicas, micro_batches=a.micro_batches,
                                   exact=not a.float_sum)  # CLIENT
    for step in rep.steps(a.steps):
        for j in rep.micro_batches():  # this rank's share of the step's micro-batches
            x, y = batch(data, step, j)
            logits = model(x)
            rep.backward(nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)), j)
        if rep.step() and rep.rank == 0 and (step % 10 == 0 or step == a.steps):
            print("step %d loss %.4f (%d of %d replicas)" % (step, rep.loss, rep.world, a.elastic_replicas), flush=True)
    if rep.rank == 0:
        digest = hashlib.sha256()
        for p in model.parameters():
            digest.update(p.detach().contiguous().numpy().tobytes())
        print(json.dumps({"event": "done", "step": rep.step_done, "loss": rep.loss,
                          "param_checksum": digest.hexdigest()[:16]}), flush=True)


if __name__ == "__main__":
    main()
