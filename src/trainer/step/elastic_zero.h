// ZeRO-1 for elastic jobs (--elastic-replicas N --shard-optimizer).
//
// Rank r of a generation of width W keeps AdamW's moments for part r of W of
// the flat buffer only (ChunkOf), as the sharded data-parallel job does. A
// lost rank's part must then come from somewhere live, so each rank also
// keeps a copy of its ring predecessor's part, refreshed after every update:
// its in-memory backup peer. That costs 2/W of the moments per step on one
// link, and each rank holds two parts instead of every part.
//
// A new generation re-cuts the moments for its width: each part of the
// step the ranks resume from (the newest live one) comes from its owner if
// it is live, else from its backup peer, and every rank takes its new part.
// The moments move as bits, so the job computes what the fault-free run
// computes. The assembly is one exact all-reduce of the whole moments
// (each element has one non-zero contributor, added as integers), a
// regroup's cost about that of one step's gradient reduction.
//
// A step is applied everywhere or rolled back: the update changes this
// rank's part before the all-gather of the parameters, so a generation that
// fails inside it restores what the step began with (kept by Hold), and
// the part it had computed is kept, tagged with its step, in case the other
// ranks completed it. If both a rank and its backup peer are lost, the part
// is gone: the ranks say so and restore from the newest checkpoint instead.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/ring_layout.h"
#include "common/status.h"
#include "trainer/comm/dist.h"
#include "trainer/model/params.h"
#include "trainer/optim/adamw.h"

namespace bulwark::trainer {

// The optimizer's range for rank `rank` of `width` in `store`.
Span ZeroRangeOf(const ParamStore& store, int width, int rank);

class ElasticZero {
 public:
  // What a generation's re-cut did, for its start line.
  struct Recut {
    bool moved = false;  // false: every rank kept its own part
    double ms = 0;
  };

  // The generation starts at `step` (restored or live); this rank owns part
  // `rank` of `width` from here on.
  void Begin(int64_t step, int rank, int width);

  // Collective over `comm`: fills `opt` (built for this generation's part)
  // with the moments of `step`, the newest live one, from `own` (this
  // process's optimizer of its last generation, or null) and the copies
  // held. `merged`: POET merged at `step`, so its group's moments are zero.
  // FailedPrecondition when some part is on no live rank.
  Result<Recut> RecutFor(Comm& comm, ParamStore& store, const AdamW* own, int64_t own_step, int64_t step, bool merged,
                         AdamW& opt);

  // Before the update: what a failed AfterUpdate rolls back to.
  void Hold(ParamStore& store, const AdamW& opt);
  // After the update: the backup exchange and the parameters' all-gather.
  // On failure the step is rolled back (see the top of this file).
  Status AfterUpdate(Comm& comm, ParamStore& store, AdamW& opt);

 private:
  struct Part {
    int part = -1, parts = 0;
    int64_t step = -1;
    torch::Tensor m, v;
  };
  template <typename Pred>
  void Drop(Pred pred);
  void Keep(Part p);
  Status Exchange(Comm& comm, const ParamStore& store, const AdamW& opt);

  int64_t step_ = 0;
  int rank_ = 0, width_ = 1;
  std::vector<Part> copies_;  // backups of the predecessor's part, and an unfinished step's own
  torch::Tensor params_before_, m_before_, v_before_;
};

}  // namespace bulwark::trainer
