#include "sim/signals.h"

#include <algorithm>
#include <map>

#include "controller/stack_analyzer.h"

namespace bulwark::sim {
namespace {

using controller::MachineId;

// The main thread's frames, innermost first, as the local cluster recorded
// them (tests/fixtures/stacks).
const std::vector<std::string>& FramesOf(RankRole role) {
  static const std::vector<std::string> kAllReduce = {
      "__futex_abstimed_wait_common", "pthread_cond_wait@@GLIBC_2.3.2",
      "c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)",
      "bulwark::trainer::Comm::AllReduceSum(std::vector<at::Tensor, std::allocator<at::Tensor> >&)",
      "bulwark::trainer::Train(bulwark::trainer::TrainConfig const&)", "main"};
  static const std::vector<std::string> kRecv = {
      "__futex_abstimed_wait_common", "pthread_cond_clockwait@GLIBC_2.30",
      "gloo::transport::tcp::UnboundBuffer::waitRecv(int*, std::chrono::duration<long, std::ratio<1l, 1000l> >)",
      "c10d::ProcessGroupGloo::RecvWork::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)",
      "bulwark::trainer::PipelineRecv(at::Tensor&)", "bulwark::trainer::Train(bulwark::trainer::TrainConfig const&)",
      "main"};
  static const std::vector<std::string> kStuck = {
      "__expf_fma", "bulwark::trainer::kernels::CrossEntropy(at::Tensor const&, at::Tensor const&)",
      "bulwark::trainer::TransformerImpl::Loss(at::Tensor const&, at::Tensor const&)",
      "bulwark::trainer::Train(bulwark::trainer::TrainConfig const&)", "main"};
  static const std::vector<std::string> kNone;
  switch (role) {
    case RankRole::kAllReduceWait: return kAllReduce;
    case RankRole::kRecvWait: return kRecv;
    case RankRole::kStuck: return kStuck;
    case RankRole::kNoStack: return kNone;
  }
  return kNone;
}

}  // namespace

std::string StackText(RankRole role, int pid) {
  return role == RankRole::kNoStack ? "" : controller::EuStackText(pid, FramesOf(role));
}

controller::StacksAnalyzed AnalyzeSample(const controller::Topology& t, const controller::Placement& p,
                                         int stuck_slot, int replicas,
                                         const std::function<RankRole(int slot)>& role_of) {
  const int rpm = p.ranks_per_machine;
  const int dp = t.dp();
  const int k = std::max(1, std::min(replicas, dp));
  const int stuck_dp = stuck_slot >= 0 ? t.Of(stuck_slot * rpm).dp : 0;
  // The sample: k replicas with every tensor and pipeline rank, numbered as
  // a job of k replicas (Megatron order: rank = tp + TP * (dp + DP * pp)).
  const controller::Topology mini{k * t.tp * t.pp, t.tp, t.pp};
  std::vector<int> real_of(mini.world);
  std::map<int, MachineId> machine_of;
  std::vector<controller::RankStack> stacks;
  std::map<int, std::string> text_of;  // by role
  for (int r = 0; r < mini.world; ++r) {
    const controller::Topology::Coord c = mini.Of(r);
    const int real = c.tp + t.tp * ((stuck_dp + c.dp) % dp + dp * c.pp);
    real_of[r] = real;
    const int slot = real / rpm;
    machine_of[r] = p.slots[slot];
    const RankRole role = role_of(slot);
    if (role == RankRole::kNoStack) continue;
    // One text per role: a rank's text differs from its peers' only in pids
    // and addresses, which normalization drops anyway.
    std::string& text = text_of[static_cast<int>(role)];
    if (text.empty()) text = StackText(role, 1000 + static_cast<int>(role));
    stacks.push_back({r, p.slots[slot], text, ""});
  }
  const controller::StackAnalysis a = controller::AnalyzeStacks(stacks, mini, machine_of);
  controller::StacksAnalyzed v;
  v.suspects = a.suspects;
  v.why = a.why + " (a sample of " + std::to_string(k) + " of " + std::to_string(dp) + " replicas)";
  for (const controller::StackGroup& g : a.groups) {
    controller::StackGroupSummary s{static_cast<int>(g.ranks.size()), g.signature, {}};
    for (int r : g.ranks) s.ranks.push_back(real_of[r]);
    std::sort(s.ranks.begin(), s.ranks.end());
    v.groups.push_back(std::move(s));
  }
  for (int r : a.missing) v.missing.push_back(real_of[r]);
  if (a.group) {
    controller::ParallelGroup g{a.group->kind, {}};
    for (int r : a.group->ranks) g.ranks.push_back(real_of[r]);
    std::sort(g.ranks.begin(), g.ranks.end());
    v.group = g.Name();
  }
  return v;
}

}  // namespace bulwark::sim
