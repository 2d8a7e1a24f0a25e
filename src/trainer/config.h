// What bulwark-train is asked to do: the model's shape and the run's settings.
//
// Settings come from three layers, later ones winning: a named preset
// (--config tiny|small) or a config file (--config FILE, "key = value" lines),
// then command-line flags. Keys in files and flags are the same names, so
// `--batch-size 8` and `batch-size = 8` mean one thing. An unknown key is an
// error that names it and the nearest known key, never silently ignored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/model/poet_options.h"

namespace bulwark::trainer {

// The widest --elastic-replicas: WORLD_SIZE's own bound. Any width splits
// the flat buffers (dist.h's ChunkOf: parts that differ by one element at
// most), so no width needs padding.
constexpr int kMaxElasticReplicas = 1 << 20;

struct ModelConfig {
  int vocab_size = 0;  // 0: take it from the data's tokenizer
  int d_model = 256;   // C
  int n_layers = 4;
  int n_heads = 4;
  int ffn = 768;       // hidden width of the SwiGLU MLP
  int context = 128;   // T, the longest sequence the model sees
  std::string init = "standard";  // standard: N(0, 0.02); normalized: unit-norm rows
  PoetOptions poet;                // enabled by --optimizer poet
  // bf16 matmuls and activations (fp32 master weights, statistics and
  // residual stream); set from --precision, not part of the shape.
  bool bf16 = false;

  int head_dim() const { return d_model / n_heads; }
  // One line naming every shape field; two configs with equal strings build
  // models whose parameters are interchangeable.
  std::string ShapeString() const;
  Status Validate() const;
};

struct TrainConfig {
  ModelConfig model;
  std::string preset = "small";
  std::string data_dir = "data/kjv";
  int batch_size = 16;        // B: sequences per rank per step
  int64_t steps = 1000;
  double lr = 2e-3;
  double min_lr_ratio = 0.1;  // cosine decays to lr * min_lr_ratio
  int64_t warmup_steps = 50;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;     // 0 disables clipping
  int64_t eval_every = 200;   // 0 disables evaluation
  int eval_batches = 8;
  uint64_t seed = 1337;
  int threads = 0;            // 0: one per core this process may use
  std::string ckpt_dir;       // empty: no checkpoints
  int64_t ckpt_every = 0;
  int ckpt_keep = 3;
  bool resume = false;
  // --resume finding completed checkpoints of which none verifies is an
  // error (starting over would silently discard the trained steps) unless
  // this is set.
  bool allow_fresh_start = false;
  std::string log_format = "human";  // human | json
  int64_t log_every = 1;      // json: a line every N steps
  bool shard_optimizer = false;
  double dist_timeout_s = 60;
  double bucket_mb = 4;       // gradient all-reduce bucket size
  std::string optimizer = "adamw";
  int64_t stop_at = 0;        // stop after this step as if preempted; 0: never
  // Every-step in-memory checkpoints through the agent (memory_checkpoint.h):
  // auto = when an agent offers its shard socket, on = required, off.
  std::string memory_ckpt = "auto";
  bool step_checksum = false;  // a parameter checksum in every step line (tests)
  // auto (bf16 where the CPU has AVX-512 BF16 or AMX), bf16 or fp32; Train()
  // resolves it into model.bf16 (precision.h).
  std::string precision = "auto";
  // Pipeline parallelism (pipeline.h): stages, and micro-batches per step
  // each rank's batch is cut into (1F1B schedule).
  int pp = 1;
  int micro_batches = 1;
  // auto (CUDA when built with it and a GPU is visible), cpu or cuda;
  // Train() resolves it (device.h).
  std::string device = "auto";
  // Elastic data parallelism (elastic.h): the job's full width in
  // data-parallel replicas, 0 for off. The global batch is this many
  // micro-batches of batch_size, whatever the number of ranks training.
  int elastic_replicas = 0;
  // What an elastic job's replicas reduce over: ring (links kept between
  // generations, ring.h) or gloo (the full mesh every other job uses).
  // An elastic pipeline (--pp > 1, elastic_pipeline.h) has one ring for
  // the world and one for each stage's replicas.
  std::string elastic_comm = "ring";
  // What reduces a CUDA rank's gradients: auto (NCCL where it applies,
  // device.h's ChooseNccl), gloo or nccl.
  std::string dist_backend = "auto";
  // The ring's all-reduce in two levels (ring.h's TwoLevel): groups of at
  // most this many ranks, then a ring across the groups; 1 keeps one flat
  // ring, 0 picks ceil(sqrt(W)) from 16 ranks on.
  int ring_group = 0;

  Status Validate() const;
};

// Applies `--config` (a preset name or a file) and then every other flag.
// `args` excludes the program and subcommand names.
Result<TrainConfig> ParseTrainArgs(const std::vector<std::string>& args);

// The presets, also what `--config NAME` selects.
Result<TrainConfig> Preset(const std::string& name);
// Applies the "key = value" lines of a config file's `text` ('#' starts a
// comment); `source` names it in errors ("small.cfg:3: ..."). Separate from
// the file read so the parser can be fuzzed without a filesystem.
Status ApplyConfigText(TrainConfig& cfg, const std::string& text, const std::string& source);
// Sets one key from its text value; keys use '-' or '_' interchangeably.
Status SetKey(TrainConfig& cfg, const std::string& key, const std::string& value);
// Help text listing every key with its current value in `cfg`.
std::string UsageText(const TrainConfig& cfg);

}  // namespace bulwark::trainer
