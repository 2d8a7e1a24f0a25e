// What the agents of a simulated fleet would send, for the real detectors
// and the real stack analyzer to read.
//
// The simulator does not decide what a fault looks like to the controller:
// it makes the signals (per-rank step reports, stack texts) and hands them to
// controller::Monitors and controller::AnalyzeStacks, as the plane does with
// the agents' reports. Cost stays bounded by sampling: between incidents the
// step reports are summarized (one report for a run of steps, then the last
// steps one by one: what the detectors keep), and a stack capture reads a
// few data-parallel replicas of the job (every pipeline stage and tensor rank
// of each) instead of all 100,000 ranks.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "controller/event.h"
#include "controller/job.h"
#include "controller/topology.h"

namespace bulwark::sim {

// What a rank is doing when its stacks are captured.
enum class RankRole {
  kAllReduceWait,  // healthy, waiting for the job's data-parallel all-reduce
  kRecvWait,       // healthy, a pipeline neighbour of a stuck rank: waiting in recv
  kStuck,          // the faulty rank: spinning in a kernel that never returns
  kNoStack,        // its machine is gone: the agent sends nothing
};

// An eu-stack text of a rank in `role`, shaped like the local cluster's
// recordings (tests/fixtures/stacks: allreduce-wait, recv-never-sent,
// spin-in-compute): the main thread's frames, then an idle helper thread.
std::string StackText(RankRole role, int pid);

// The stack analyzer's verdict on a sample of the job: `replicas`
// data-parallel indexes (the first is `stuck_slot`'s own, the rest the next
// ones), each with all its tensor and pipeline ranks. `role_of(slot)` says
// what the machine in a slot is doing. Ranks are translated back to the
// job's own numbers, so the policy reads the verdict as the plane's.
controller::StacksAnalyzed AnalyzeSample(const controller::Topology& t, const controller::Placement& p,
                                         int stuck_slot, int replicas,
                                         const std::function<RankRole(int slot)>& role_of);

}  // namespace bulwark::sim
