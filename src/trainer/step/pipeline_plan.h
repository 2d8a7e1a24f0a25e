// Pipeline parallelism, the pure part: which rank is which (dp, pp), which
// layers each stage owns, and the 1F1B order of micro-batch passes. No
// libtorch, so it is tested in milliseconds (tests/unit/pipeline_plan_test.cc).
//
// Rank layout (WORLD_SIZE = DP x PP): rank = pp * DP + dp. Consecutive ranks
// are the data-parallel replicas of one stage, so the DP all-reduce stays
// among neighbours (usually one machine) and a pipeline, ranks
// {dp, DP + dp, 2 DP + dp, ...}, spans machines, as in Megatron-LM's order.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace bulwark::trainer {

struct PipelineCoords {
  int dp = 0, pp = 0;            // this rank's replica and stage
  int dp_size = 1, pp_size = 1;  // DP and PP
  bool first() const { return pp == 0; }
  bool last() const { return pp == pp_size - 1; }
};

// The coordinates of `rank`; an error naming the fix when `pp` does not
// divide the world size.
Result<PipelineCoords> RankCoords(int rank, int world_size, int pp);
// A world the job can run at, checked by every rank before any rendezvous,
// so that all of them refuse it at once and none waits out its collective
// timeout for a peer that already left (a test saw 65 s): `pp` divides it,
// and an elastic job (`elastic_replicas` > 0) holds at most that many
// replicas, pipelines when pp > 1.
Status CheckWorld(int world_size, int pp, int elastic_replicas);
int RankOf(int dp, int pp, int dp_size);

// Decoder blocks [first, last) of one stage; the first stage also embeds,
// the last also applies the final norm and LM head.
struct StageLayers {
  int first = 0, last = 0;
  bool embed = false, head = false;
};

// A balanced split of n_layers over `stages` (1 <= stages <= n_layers):
// every stage gets floor(n/stages) blocks and the remainder goes one each to
// the earliest stages, which do not carry the LM head.
std::vector<StageLayers> SplitLayers(int n_layers, int stages);
// "stage 0: embedding + blocks 0-1 | stage 1: blocks 2-3 + norm + head"
std::string DescribeSplit(const std::vector<StageLayers>& split);

// One pass of one micro-batch on one stage.
struct PipeOp {
  enum Kind { kForward, kBackward } kind;
  int micro;
  bool operator==(const PipeOp& o) const { return kind == o.kind && micro == o.micro; }
};

// 1F1B (PipeDream-flush): stage s runs min(S - s - 1, M) warm-up forwards,
// then alternates one forward and one backward, then drains the backwards.
// At most S - s micro-batches' activations are alive at once.
std::vector<PipeOp> OneFOneB(int stage, int stages, int micro_batches);

// The idle share of a synchronous pipeline step with equal stage times:
// (S - 1) / (M + S - 1).
double BubbleFraction(int stages, int micro_batches);

}  // namespace bulwark::trainer
