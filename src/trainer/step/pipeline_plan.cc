#include "trainer/step/pipeline_plan.h"

#include <algorithm>

namespace bulwark::trainer {

Result<PipelineCoords> RankCoords(int rank, int world_size, int pp) {
  if (pp < 1 || world_size % pp != 0) {
    return Status::InvalidArgument("WORLD_SIZE " + std::to_string(world_size) + " is not divisible by --pp " +
                                   std::to_string(pp) + "; launch data-parallel x pipeline ranks (a multiple of " +
                                   std::to_string(pp) + ") or change --pp");
  }
  PipelineCoords c;
  c.pp_size = pp;
  c.dp_size = world_size / pp;
  c.pp = rank / c.dp_size;
  c.dp = rank % c.dp_size;
  return c;
}

Status CheckWorld(int world_size, int pp, int elastic_replicas) {
  Result<PipelineCoords> c = RankCoords(0, world_size, pp);
  if (!c.ok()) return c.status();
  if (elastic_replicas <= 0 || c->dp_size <= elastic_replicas) return Status::OK();
  const std::string e = std::to_string(elastic_replicas), w = std::to_string(world_size);
  if (pp > 1) {
    return Status::InvalidArgument("WORLD_SIZE " + w + " holds " + std::to_string(c->dp_size) + " pipelines of --pp " +
                                   std::to_string(pp) + ", more than --elastic-replicas " + e +
                                   "; raise --elastic-replicas");
  }
  return Status::InvalidArgument("WORLD_SIZE " + w + " exceeds --elastic-replicas " + e +
                                 ", the job's full width; raise --elastic-replicas");
}

int RankOf(int dp, int pp, int dp_size) { return pp * dp_size + dp; }

std::vector<StageLayers> SplitLayers(int n_layers, int stages) {
  std::vector<StageLayers> out(stages);
  const int base = n_layers / stages, extra = n_layers % stages;
  int next = 0;
  for (int s = 0; s < stages; ++s) {
    out[s].first = next;
    next += base + (s < extra ? 1 : 0);
    out[s].last = next;
  }
  out.front().embed = true;
  out.back().head = true;
  return out;
}

std::string DescribeSplit(const std::vector<StageLayers>& split) {
  std::string s;
  for (size_t i = 0; i < split.size(); ++i) {
    const StageLayers& l = split[i];
    if (i) s += " | ";
    s += "stage " + std::to_string(i) + ":";
    std::vector<std::string> parts;
    if (l.embed) parts.push_back("embedding");
    if (l.last > l.first) {
      parts.push_back(l.last - l.first == 1 ? "block " + std::to_string(l.first)
                                            : "blocks " + std::to_string(l.first) + "-" + std::to_string(l.last - 1));
    }
    if (l.head) parts.push_back("norm + head");
    for (size_t p = 0; p < parts.size(); ++p) s += (p ? " + " : " ") + parts[p];
  }
  return s;
}

std::vector<PipeOp> OneFOneB(int stage, int stages, int micro_batches) {
  std::vector<PipeOp> ops;
  const int warmup = std::min(stages - stage - 1, micro_batches);
  int f = 0, b = 0;
  for (; f < warmup; ++f) ops.push_back({PipeOp::kForward, f});
  for (; f < micro_batches; ++f, ++b) {
    ops.push_back({PipeOp::kForward, f});
    ops.push_back({PipeOp::kBackward, b});
  }
  for (; b < micro_batches; ++b) ops.push_back({PipeOp::kBackward, b});
  return ops;
}

double BubbleFraction(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace bulwark::trainer
