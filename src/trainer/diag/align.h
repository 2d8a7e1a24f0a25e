// Bitwise alignment (ByteRobust §2.4, the NaN case): one fixed training step
// whose result every healthy machine computes bit for bit the same.
//
//   bulwark-train --config tiny --align [--align-threads N] [--align-steps S]
//
// builds the configured model (its architecture: the job's own argv with
// --align appended) with fixed weights (--seed), runs one forward and
// backward on a fixed batch, and prints one JSON line
//   {"align_hash":"<16 hex>","loss":...,"ms":...,"threads":N}
// where the hash is FNV-1a over the loss's and every gradient's bits. No
// data set, no rendezvous, no checkpoint: a diagnostic, run while the job
// is stopped or beside its ranks. It runs in fp32 on one thread by default:
// libtorch's CPU reductions split work by thread count, so a different
// count may round differently (measured: see docs/ladder.md), and machines
// must compare like with like.
//
// It runs where the job's --device says. On a GPU machine it runs on every
// GPU in turn with deterministic kernels (healthy GPUs of one model agree
// bit for bit): the machine's hash is theirs when they all agree, and when
// they do not the line says which GPU differs ("gpus_disagree"), so the
// machine is found even when no other machine is there to outvote it.
//
// Test hook (silent data corruption, emulated): BULWARK_SDC=nan|drift[:R]
// corrupts the step's matmul results (one gradient element made NaN, or
// perturbed by 1e-3 relative) with probability R (default 1) per step, with
// no log line; the rank link's "sdc-nan"/"sdc-drift" inject turns the same
// hook on in a training rank (sdc.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/config.h"

namespace bulwark::trainer {

// With S > 1 it trains S steps (plain SGD) and hashes the parameters too;
// under RANK/WORLD_SIZE/MASTER_* it is one group of a dual-phase replay:
// every rank computes its own fixed batch and the gradients are averaged,
// and rank 0 prints the line with "finite" (loss, grads, params all finite).
//
// Under --pp P > 1 in a group of more than one rank it replays the job's
// pipeline layout (a vertical group of dual-phase replay): stages exchange
// activations and gradients, replicas of a stage average their gradients.
// With `stage` >= 0 (--align-stage S; a horizontal group) the model is
// shrunk to stage S's share of the layers and run data parallel.
Status RunAlign(const TrainConfig& cfg, int threads, int steps = 1, int stage = -1);

// One machine's verdict on its GPUs' hashes (in device order). All equal:
// `hash` is theirs and `disagree` empty. Otherwise `hash` is a digest of
// them all (no healthy machine's), and `disagree` names the GPUs apart from
// a strict majority ("GPU 3 computed <hex>; the other 7 GPUs <hex>") or
// lists every GPU's when none holds one.
struct DeviceHashes {
  uint64_t hash = 0;
  std::string disagree;
};
DeviceHashes JudgeDeviceHashes(const std::vector<uint64_t>& per_gpu);

}  // namespace bulwark::trainer
