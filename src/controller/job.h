// The job: what is wanted (JobSpec), what was decided (Placement) and where
// the job is in its lifecycle (JobState).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/ring_layout.h"
#include "common/status.h"
#include "controller/machine.h"
#include "controller/time.h"
#include "controller/topology.h"

namespace bulwark::controller {

using JobId = std::string;
using RankId = int;

// Desired state, written by the user and never by the policy.
struct JobSpec {
  JobId id;
  int world_size = 0;         // ranks in the job
  int ranks_per_machine = 1;  // LOCAL_RANK runs 0..ranks_per_machine-1
  std::string command;        // what each rank runs
  // Parallel layout (topology.h): tensor- and pipeline-parallel sizes; the
  // rest is data parallel. The analyzer and the backup planner use it.
  int tp = 1, pp = 1;
  // How faults are recovered. kStandby is bulwark's way: evict, swap in a
  // warm standby, restore from in-memory checkpoints. kRequeue is the
  // conventional baseline (a cluster without bulwark): stop every rank,
  // give the machines back, wait `provisioning_delay` for machines acquired
  // cold, restart from durable storage. Same detection, for a fair ratio.
  // kElastic is kStandby for a data-parallel job whose ranks keep training
  // on fewer replicas (trainer/step/elastic.h): when the pool cannot fill the
  // slots of lost machines, the job restarts on the machines it has instead
  // of waiting, and grows back when machines join. A lost machine must take
  // whole replicas with it: replicas fit in machines (pp 1, tp dividing
  // ranks_per_machine), or each is a pipeline across machines that hold
  // one stage each (pp > 1, tp dividing ranks_per_machine: tp 1 as
  // trainer/step/elastic_pipeline.h runs it, or one TP group of a stage per
  // machine as the simulator's TP 8 x PP 10 job), whose other machines go
  // back to the pool when one of them is lost.
  enum class Recovery { kStandby, kRequeue, kElastic };
  Recovery recovery = Recovery::kStandby;
  // Models a scheduler's requeue, node allocation and container start.
  // 10 min: ByteRobust's figure for failover at 10k GPUs without it
  // (docs/recovery-comparison.md).
  Duration provisioning_delay = std::chrono::minutes(10);

  // world_size / ranks_per_machine, valid only after Validate().
  int MachinesNeeded() const { return world_size / ranks_per_machine; }
  Topology topology() const { return Topology{world_size, tp, pp}; }
  bool elastic() const { return recovery == Recovery::kElastic; }
  // InvalidArgument naming the field when the spec cannot be placed.
  Status Validate() const;
};

// Rank -> machine, decided by the controller. Slot i hosts ranks
// [i*ranks_per_machine, (i+1)*ranks_per_machine). A replacement machine takes
// over the slot of the one it replaces, so every rank keeps its id and with
// it its checkpoint shard and its place in the parallel groups.
struct Placement {
  int64_t generation = 0;  // bumped by every RestartAll; 0 = never started
  int ranks_per_machine = 1;
  std::vector<MachineId> slots;

  bool empty() const { return slots.empty(); }
  int world_size() const { return static_cast<int>(slots.size()) * ranks_per_machine; }
  const MachineId& MachineOf(RankId rank) const { return slots[rank / ranks_per_machine]; }
  // An elastic job below full width (JobSpec::kElastic) has fewer slots
  // than it needs; the ranks of the slots it has are numbered densely.
  // Slot index of `machine`, or -1 when it hosts no rank.
  int SlotOf(const MachineId& machine) const;
  bool Contains(const MachineId& machine) const { return SlotOf(machine) >= 0; }
  // An elastic job's ring layout (common/ring_layout.h), carried from one
  // generation to the next so that a narrowing shrinks only the lost
  // ranks' groups and a growth adds to the smallest (reconcile.cc's
  // NextRing; a replayed journal decides it again). Empty (a first start,
  // a pipeline job), or of another width, means RingLayout::Default: the
  // actuator cuts the plans by it.
  RingLayout ring;
};

// The job's lifecycle.
//
//   kPending ─> kRestarting <─> kRunning
//       │          │  ▲            │
//       └──> kWaitingForMachines <─┘   (every state but kStopped -> kStopped)
//
// kRestarting: ranks were (re)started and no step has completed since; the
//   first StepCompleted moves to kRunning and ends the open incident.
// kWaitingForMachines: the placement lacks healthy machines and the standby
//   pool cannot fill it; surviving ranks cannot progress without the full
//   world, so the job holds until a machine joins.
// kStopped is terminal: the policy gave up (crash loop, code bug) and a human
//   must act; a new attempt is a new job.
enum class JobState { kPending, kRestarting, kRunning, kWaitingForMachines, kStopped };
constexpr int kNumJobStates = 5;

const char* JobStateName(JobState s);
// "standby", "requeue" or "elastic", and back; an unknown name is an error
// that lists the three.
const char* RecoveryName(JobSpec::Recovery r);
Result<JobSpec::Recovery> ParseRecovery(const std::string& name);
// OK for a legal step (kRestarting -> kRestarting is one: a restart before the
// first step); FailedPrecondition naming from and to otherwise.
Status CheckJobTransition(JobState from, JobState to);

}  // namespace bulwark::controller
