// ClusterState: everything the policy knows, in memory. The policy reads and
// changes it; the later store layer persists it; nothing here does I/O.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "controller/action.h"
#include "controller/crash_attribution.h"
#include "controller/incident.h"
#include "controller/job.h"
#include "controller/ladder.h"
#include "controller/ledger.h"
#include "controller/machine.h"
#include "controller/releases.h"
#include "controller/time.h"

namespace bulwark::controller {

// A hash index over ClusterState::machines for FindMachine: a lookup in the
// ordered map of a 12,500-machine fleet walks 14 nodes and compares 14 ids,
// and the ladder's diagnostics look up every machine several times a round
// (most of a simulated year's time). The map keeps the order decisions
// depend on; this only finds. Machines are only ever added, and a map's
// nodes do not move, so views of its keys and pointers to its values stay
// valid; a copy of the state starts empty and is rebuilt at its first use.
class MachineIndex {
 public:
  MachineIndex() = default;
  MachineIndex(const MachineIndex&) {}
  MachineIndex& operator=(const MachineIndex&) {
    by_id_.clear();
    return *this;
  }
  MachineIndex(MachineIndex&&) = default;  // the map's nodes move with it
  MachineIndex& operator=(MachineIndex&&) = default;

  // The machine with `id` in `machines`, or null; brings the index up to
  // date first when `machines` grew behind its back.
  MachineStatus* Find(const std::map<MachineId, MachineStatus>& machines, const MachineId& id) const;
  // `added` was just inserted into `machines`: indexed at once, so that a
  // fleet's arrivals do not rebuild the index each.
  void Added(const std::map<MachineId, MachineStatus>& machines,
             std::map<MachineId, MachineStatus>::iterator added);

 private:
  mutable std::unordered_map<std::string_view, MachineStatus*> by_id_;
};

// The periodic bitwise check (policy_align.cc): the one in flight, if
// any, and what the checks found so far.
struct AlignCheckState {
  int64_t id = 0;  // the check in flight; 0: none
  Time deadline{};
  std::set<MachineId> waiting;              // asked, not answered yet
  std::map<MachineId, std::string> hashes;  // answers with a hash
  std::map<MachineId, std::string> failed;  // answers without one: why the run failed
  std::map<MachineId, std::string> own;     // machines whose own GPUs disagreed: the detail
  // The job's step when the check in flight started, and that of the
  // latest clean check: every machine was sound after it, so a drift found
  // later entered the weights after it (0: no clean check yet).
  int64_t from_step = 0, clean_step = 0;
  int64_t started = 0, clean = 0;           // checks ever; those that found nothing
  std::string last;                         // the latest verdict, for status
};

struct ClusterState {
  // Desired.
  JobSpec spec;

  // Decided.
  JobState job = JobState::kPending;
  Time job_since{};
  Placement placement;
  // A reattempt asked for a restart on the same machines; Reconcile issues it.
  bool restart_pending = false;
  std::string restart_reason;
  std::optional<Time> last_restart_at;  // rank exits observed before it are stale
  // An elastic job restarted at full width: its first step ends the
  // degraded interval of the incidents that narrowed it.
  bool rejoin_pending = false;

  // Observed.
  std::map<MachineId, MachineStatus> machines;  // ordered: decisions are deterministic
  MachineIndex machine_index;                   // finds in `machines` (FindMachine)
  int64_t last_step = 0;
  int64_t furthest_step = 0;  // the furthest step ever completed (last_step falls back at a restore)
  // Step of the latest checkpoint reported; 0 = none. Advisory: agents
  // restore the newest complete copy they hold, which the first step after
  // a restart reveals (Incident::restored_step).
  int64_t checkpoint_step = 0;
  // Bumped by the first step after each restart; crashes of an older epoch
  // no longer count against the restart budget.
  int64_t progress_epoch = 0;
  std::vector<CrashRecord> crashes;  // software crashes within the crash window
  std::optional<Time> last_progress_at;  // the latest step or (re)start: chance counts crashes from it
  // The generation whose ranks reported their restore: until then a crash
  // is a start-up crash (crash_attribution.h), after it one at a step.
  int64_t restored_generation = 0;
  // Machines evicted by an implicit fault (hang, fail-slow, NaN culprit)
  // since the last progress, by the slot they held and the step it hit: the
  // same fault at the same step on the machine that replaced one is the
  // job's, not the machine's (policy_implicit.cc).
  struct ImplicitEviction {
    std::string kind;  // "hang", "slow", "nan"
    int64_t step = 0;
    int slot = -1;
    MachineId machine;
  };
  std::vector<ImplicitEviction> implicit_evictions;
  // A step whose anomaly with no culprit was already reattempted: the same
  // anomaly at the same step again is deterministic, not a fault.
  int64_t anomaly_reattempted_step = -1;
  // The job's releases (releases.h).
  ReleaseState releases;
  // Requeue mode (JobSpec::Recovery::kRequeue): every rank was stopped and
  // the machines given back at a fault; the restart waits until
  // `requeue_until` (the modeled provisioning delay), then RequeueDue grants it.
  std::optional<Time> requeue_until;
  bool requeue_granted = false;
  // The stop-time ladder in progress, if any (ladder.h).
  LadderStatus ladder;
  // The periodic bitwise check's clock (LadderConfig::align_every): the
  // first step, then the start of the latest check.
  std::optional<Time> align_check_from;
  // A drifting machine found by the periodic check: the restart that
  // replaces it restores at most this step (policy_align.cc); cleared by
  // the first step after it.
  std::optional<int64_t> rollback_to;
  // The periodic bitwise check, beside the ranks (policy_align.cc).
  AlignCheckState align;
  // Observations that opened no incident (a job-wide slowdown), newest last.
  std::vector<std::string> notes;

  // Derived indexes, kept by SetMachineState so that a reconcile of a
  // 10,000-machine fleet does not scan it.
  std::array<int, kNumMachineStates> machines_in_state{};
  std::set<MachineId> standbys;  // machines in kStandby, in id order
  // Standbys that said whether they hold spares of the job (StandbyReady)
  // since they became standbys: an elastic job grows onto these only.
  std::set<MachineId> ready_standbys;
  // Slots of the placement whose machine left kActive since the latest
  // restart: the slots Reconcile must fill, without scanning the placement.
  std::set<int> vacated_slots;
  // Machines that ever entered kStandby. With the pool's shortfall it names
  // a replenish request: the shortfall only shrinks when a machine arrives.
  int64_t standby_arrivals = 0;

  // Failure domains that lost machines (policy_domains.cc), by name.
  struct DomainStatus {
    // Heartbeat losses of its machines within domain_burst_window of the
    // newest: (fault time, machine).
    std::vector<std::pair<Time, MachineId>> recent;
    bool down = false;            // a burst made it one incident; until its machines return
    Time down_at{};
    std::set<MachineId> lost;     // machines lost with it in this episode
    int64_t incident = 0;         // the incident that names it (0: only standbys lost)
    std::optional<Time> returned_at;  // its latest return: the probation's clock
    bool flapping = false;        // lost again within domain_probation of a return
    int episodes = 0;
  };
  std::map<std::string, DomainStatus> domains;
  // How many of `domains` are down: Reconcile asks on every decision, and a
  // year at 100k GPUs has 6,000 racks to scan (SetDomainDown keeps it).
  int domains_down = 0;
  // Machines whose checkup is in flight (MachineStatus::checkup set, kept by
  // SetCheckup): while none is, a diagnostics answer is the ladder's
  // without looking its machine up.
  int checkups_in_flight = 0;
  // Checkups of over-evicted machines answered (policy_checkup.cc).
  int64_t checkups_passed = 0;
  int64_t checkups_failed = 0;

  IncidentLog incidents;
  Ledger ledger;

  MachineStatus* FindMachine(const MachineId& id);
  const MachineStatus* FindMachine(const MachineId& id) const;
  int CountIn(MachineState s) const { return machines_in_state[static_cast<int>(s)]; }
  // True when `id` is active, i.e. placed in the job (every active machine
  // holds a slot of the placement, and a placed machine that is not active
  // is a slot to fill).
  bool IsActive(const MachineId& id) const;
};

// Registers a new machine in kJoining. FailedPrecondition if it is known.
Result<MachineStatus*> AddMachine(ClusterState& state, const MachineId& id, Time at);
// The only way a machine's state changes: checks the transition and keeps
// the derived indexes in step.
Status SetMachineState(ClusterState& state, const MachineId& id, MachineState to, Time at,
                       std::string reason);
// The only way the job's state changes (see CheckJobTransition).
Status SetJobState(ClusterState& state, JobState to, Time at);
// Marks `d`, one of state.domains, down or back, counting state.domains_down.
void SetDomainDown(ClusterState& state, ClusterState::DomainStatus& d, bool down);
// Sets m.checkup (0: none in flight), counting state.checkups_in_flight.
void SetCheckup(ClusterState& state, MachineStatus& m, int64_t incident);

// Applies a decided action to the state: what the actuator is about to make
// true. Applying the action that matches the current state again (a repeat
// of the same wait) changes nothing.
Status Apply(ClusterState& state, const Action& action, Time now);

}  // namespace bulwark::controller
