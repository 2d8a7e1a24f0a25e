#!/usr/bin/env python3
"""A small PyTorch DDP job (CPU, Gloo) that bulwark protects: it reports
every step (bulwark.step) and checkpoints every step into its agent's
memory (bulwark.save), and after a restart resumes from bulwark.restore().

    --checkpoint memory   every step into the agent's memory (the client)
    --checkpoint disk     torch.save to --ckpt-dir every --ckpt-every steps
                          (what a job without the client does)
    --checkpoint none     a restart begins again at step 1

Rank 0 prints one JSON line per step with a checksum of the parameters
({"event": "checksum", ...}), so a faulted run can be compared bitwise with
a fault-free one. Training is deterministic: batches are drawn from a
generator seeded by (step, rank), dropout draws from the global RNG, which
the client saves and restores, and every rank seeds it differently.

Under bulwark the agent sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
(init env://); run directly, pass --init file:///tmp/somefile plus --rank and
--world-size.
"""

import argparse
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bulwark  # noqa: E402

DIM, HIDDEN, BATCH = 64, 256, 32


def batch(step, rank):
    # Test-only (tests/cluster/python_checkpoint_cluster_test.cc): while the file
    # BULWARK_EXAMPLE_BLOCK_LOADER names exists, rank BULWARK_EXAMPLE_BLOCK_RANK
    # of the first run blocks here, as a loader stuck on its storage would,
    # and its peers wait for it in the gradients' all-reduce.
    block = os.environ.get("BULWARK_EXAMPLE_BLOCK_LOADER")
    if (block and rank == int(os.environ.get("BULWARK_EXAMPLE_BLOCK_RANK", "-1"))
            and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"):
        while os.path.exists(block):
            time.sleep(0.1)
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(BATCH, DIM, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


def checksum(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=0, help="0: train until stopped")
    ap.add_argument("--stop-at", type=int, default=0, help="stop after this step (the schedule stays --steps')")
    ap.add_argument("--checkpoint", choices=("memory", "disk", "none"), default="memory")
    ap.add_argument("--ckpt-dir", default="")
    ap.add_argument("--ckpt-every", type=int, default=20)
    ap.add_argument("--init", default="env://")
    ap.add_argument("--rank", type=int, default=int(os.environ.get("RANK", "0")))
    ap.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", "1")))
    a = ap.parse_args()
    if a.checkpoint == "disk" and not a.ckpt_dir:
        sys.exit("ddp_train.py: --checkpoint disk needs --ckpt-dir DIR")

    torch.set_num_threads(1)
    # A dead peer ends this rank with bulwark's peer-lost code: its agent
    # then waits for the peer's own fault instead of blaming this machine.
    with bulwark.peer_loss_exits():
        dist.init_process_group("gloo", init_method=a.init, rank=a.rank, world_size=a.world_size)
        train(a)
    dist.destroy_process_group()


def train(a):
    rank = dist.get_rank()
    torch.manual_seed(0)   # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.ReLU(), nn.Dropout(0.1), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, 1))
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    torch.manual_seed(1 + rank)   # dropout masks differ per rank

    start = 0
    if a.checkpoint == "memory":
        r = bulwark.restore()
        if r is not None:
            model.load_state_dict(r.state["model"])
            opt.load_state_dict(r.state["optimizer"])
            start = r.step
            if rank == 0:
                print(json.dumps({"event": "restored", "step": start, "checksum": checksum(model)}), flush=True)
    elif a.checkpoint == "disk":
        path = os.path.join(a.ckpt_dir, "ckpt.pt")
        if os.path.exists(path):
            saved = torch.load(path)
            model.load_state_dict(saved["model"])
            opt.load_state_dict(saved["optimizer"])
            torch.set_rng_state(saved["rng"][rank])
            start = saved["step"]
            if rank == 0:
                print(json.dumps({"event": "restore", "step": start, "source": "disk", "newest_step": start}),
                      flush=True)
    if rank == 0:
        print(json.dumps({"event": "start", "start_step": start}), flush=True)

    step = start
    ckpt_ms = 0.0   # what the previous step's checkpoint cost
    while a.steps == 0 or step < a.steps:
        step += 1
        t = time.monotonic()
        x, y = batch(step, rank)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
        compute_ms = (time.monotonic() - t) * 1000.0
        # Printed before the checkpoint: the newest step rank 0 completed,
        # saved or not, from which a fault's lost steps are counted.
        if rank == 0:
            print(json.dumps({"event": "checksum", "step": step, "loss": round(loss.item(), 6),
                              "checksum": checksum(model), "compute_ms": round(compute_ms, 2),
                              "ckpt_ms": round(ckpt_ms, 2)}), flush=True)
        t = time.monotonic()
        if a.checkpoint == "memory":
            bulwark.save(step, {"model": model.state_dict(), "optimizer": opt.state_dict()})
        elif a.checkpoint == "disk" and step % a.ckpt_every == 0:
            rngs = [torch.empty_like(torch.get_rng_state()) for _ in range(dist.get_world_size())]
            dist.all_gather(rngs, torch.get_rng_state())
            if rank == 0:
                tmp = os.path.join(a.ckpt_dir, "ckpt.pt.tmp")
                os.makedirs(a.ckpt_dir, exist_ok=True)
                torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict(), "rng": rngs}, tmp)
                os.replace(tmp, os.path.join(a.ckpt_dir, "ckpt.pt"))
        ckpt_ms = (time.monotonic() - t) * 1000.0
        bulwark.step(step, loss=loss.item(), grad_norm=float(norm), compute_ms=compute_ms)
        if step == a.stop_at:
            break


if __name__ == "__main__":
    main()
