// `bulwark demo`, the project's main job: a local cluster trains the small
// model data-parallel while a schedule injects every explicit fault class;
// a live status line while it runs, then the incident table, the ledger and
// a report (HTML with an SVG timeline, Markdown, JSON) in `out`.
//
// `bulwark bench-recovery`: each fault class several times on a small
// cluster; median detect and recover seconds per class and where the
// recovery seconds go. Prints figures, never judges them.
#pragma once

#include <string>

#include "common/status.h"

namespace bulwark::demo {

struct DemoOptions {
  std::string exe_dir;              // where bulwark and bulwark-train live
  std::string out = "runs/demo";    // report files, checkpoints and the cluster dir
  std::string data = "data/kjv";    // a prepared corpus (bulwark-train prepare)
  std::string config = "small";
  // The job's total; it must outlast the schedule, and steps past it only
  // wait for the end. With a gap of 10 the schedule ends near step 150 at
  // 2.2 s a step (a loaded host) and near 190 at 0.5 s (a quiet one, where
  // the slow machine's 50 s of judging trains ~50 steps).
  int steps = 260;
  int batch = 4;                    // sequences per rank per step: 4 ranks share 2 cores
  int ckpt_every = 10;              // lost work per fault is at most this many steps
  int threads = 1;                  // per rank: 4 ranks share 2 cores
  int machines = 4;                 // one rank each
  int standby = 2;
  int gap_steps = 10;               // training between faults, so each shows in the timeline
  bool json = false;                // the run record on stdout; progress on stderr
};

// OK when every fault was recovered from and training completed; otherwise
// the first failure, after the report of what happened was written and the
// cluster brought down.
Status RunDemo(const DemoOptions& o);

struct BenchOptions {
  std::string exe_dir;
  std::string out = "runs/bench-recovery";
  std::string data = "data/kjv";
  std::string config = "tiny";
  int repeat = 3;
  int threads = 1;
};

Status RunRecoveryBench(const BenchOptions& o);

// bench/recovery_comparison (compare_bench.cc): the same faults under the
// conventional requeue and under bulwark's path, as ByteRobust defines its
// ratios (warm standby vs requeue for a lost machine, hot update vs
// requeue for a code change). Requeue runs with no provisioning delay and
// the modeled delay is added to it, disclosed beside the figure.
struct CompareBenchOptions {
  std::string exe_dir;
  std::string out = "runs/bench-compare";
  std::string data = "data/kjv";
  std::string config = "tiny";
  int repeat = 2;
  int threads = 1;
  // Seconds a requeue waits for machines acquired cold; 600: ByteRobust's
  // ">10 min at 10k GPUs" for failover without warm standbys.
  int provisioning_delay_s = 600;
  int persist_every = 50;  // durable checkpoints: the requeue's restore point
};
Status RunCompareBench(const CompareBenchOptions& o);

// bench/implicit (implicit_bench.cc): each implicit fault class `repeat`
// times on 4 machines; detect, localize, recover and lost steps per class,
// and whether the right machine went.
Status RunImplicitBench(const BenchOptions& o);

// bench/ladder (ladder_bench.cc): a transient crash, a compute-fail
// machine, a release that cannot start and a silently corrupting machine,
// `repeat` rounds; the mechanism that resolved each, the time per rung, and
// the shares beside ByteRobust's.
Status RunLadderBench(const BenchOptions& o);

struct CheckpointBenchOptions {
  std::string exe_dir;
  std::string out = "runs/bench-checkpoint";
  std::string data = "data/kjv";
  std::string config = "small";
  int rounds = 2;
  int steps = 40;
  int warmup = 5;
  int threads = 1;
  int persist_every = 20;
  // ZeRO-1: each rank's moments are its own, so backups are pushed over the
  // network instead of written by the peer from replicated state.
  bool shard_optimizer = false;
};

// bench/checkpoint_overhead (checkpoint_bench.cc).
Status RunCheckpointBench(const CheckpointBenchOptions& o);

}  // namespace bulwark::demo
