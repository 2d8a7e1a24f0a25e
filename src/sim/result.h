// What one simulated run measured, per arm (bulwark and the baselines on the
// same fault trace), and the timeline statistics the report needs.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "controller/ledger.h"

namespace bulwark::sim {

struct ArmResult {
  std::string name;  // "bulwark", "requeue", "torchelastic"
  double wall = 0;   // seconds
  // Seconds per ledger category (controller::TimeCategory order).
  std::array<double, controller::kNumTimeCategories> by_category{};
  double ettr = 0;                // productive / wall, as the ledger counts it
  double checkpoint_stall = 0;    // blocking checkpoint time the ledger counts as productive
  double ettr_with_stalls = 0;    // (productive - checkpoint_stall) / wall
  double ettr_by_steps = -1;      // new steps x full-width step time / wall; -1 where not modelled
  double window_min_ettr = -1;    // min over every 1 h window; -1 where not modelled
  double longest_unproductive = 0;
  int64_t faults = 0;             // faults of the trace that hit this arm
};

// The bulwark arm's own figures: the controller's view and the fleet's.
struct FleetStats {
  int machines = 0;
  int initial_standbys = 0;
  int standby_target = 0;          // the policy's Binomial quantile
  double hang_first_step = 0;      // seconds, as the controller ran with it
  bool hang_first_step_raised = false;
  int64_t events = 0;              // events handed to Controller::Handle
  int64_t refused = 0;             // events the controller refused (should be 0)
  std::string first_refusal;
  int64_t restarts = 0;
  int64_t evicted = 0;
  int64_t healthy_evicted = 0;     // over-eviction: machines evicted with no fault of their own
  int64_t standbys_requested = 0;
  int64_t standbys_arrived = 0;
  int64_t waits = 0;               // WaitForMachines: an eviction found the pool empty
  int max_deficit = 0;
  int64_t slow_undetected = 0;     // slow machines the fail-slow detector never flagged (sampling gave up)
  int64_t benign_spikes = 0;       // benign loss spikes the ranks reported
  int64_t high_water = 0;          // the last step the job reached
  int64_t regroups = 0;            // elastic restarts that kept the survivors
  int64_t narrow_restarts = 0;     // restarts onto fewer replicas than the job's DP
  int64_t returned_to_pool = 0;    // healthy machines of a broken pipeline sent back to the pool
  double restart_seconds = 0;      // the priced restarts, summed (decision -> first step)
  int64_t trace_faults = 0;        // faults drawn from the trace, whether or not they hit the job
  // Liveness (sim/heartbeats.h): machines the core's rule found lost for
  // their silence, alone and with their domain, the checks it ran (ticks
  // while a silent machine could be lost), mass silences it saw, and the
  // longest lease it held a machine to (seconds).
  int64_t heartbeat_lost = 0;
  int64_t heartbeat_lost_with_domain = 0;
  int64_t liveness_checks = 0;
  int64_t mass_silences = 0;
  double max_lease = 0;
  uint64_t trace_digest = 0xcbf29ce484222325ULL;  // FNV-style digest of (time, class, slot, manual) of each
  // Failure domains (SimConfig::domains): switch faults, the machines they
  // took (placed ones, and the pipeline replicas those belonged to), the
  // machines back when their switch was repaired, or kept out (a rack with
  // one live machine left is a machine fault to the controller; a
  // flapping switch's machines wait for an operator), the incidents that
  // named a switch, infant failures.
  int racks = 0;
  int64_t switch_faults = 0;
  int64_t switch_machines_lost = 0;
  int64_t switch_placed_lost = 0;
  int64_t switch_replicas_hit = 0;
  int64_t switch_returned = 0;
  int64_t switch_kept_out = 0;
  int64_t switch_checkups_cut = 0;  // of switch_machines_lost: out for a checkup then
  int64_t domain_incidents = 0;
  int64_t infant_faults = 0;
  // Checkups of machines over-evicted on suspicion (PolicyConfig::
  // checkup_evicted): asked, back in the pool (of them, with a fault the
  // checkup missed), kept out (of them, healthy: none in the model), and
  // the time from eviction to return. healthy_out_days: machine-days that
  // healthy evicted machines spent out of service, returned or not by the end.
  int64_t checkups = 0;
  int64_t checkup_returned = 0;
  int64_t checkup_returned_broken = 0;
  int64_t checkup_kept = 0;
  double checkup_return_mean_s = 0, checkup_return_max_s = 0;
  // Of checkup_returned, the machines over-evicted on suspicion (not a
  // switch's, checked after its repair), and their time out.
  int64_t suspect_returned = 0;
  double suspect_return_mean_s = 0, suspect_return_max_s = 0;
  double healthy_out_days = 0;
  int in_service_end = 0;          // machines active or standby at the end
  bool stopped = false;
  std::string stop_reason;
  // class -> resolution -> count, from the controller's incidents.
  std::map<std::string, std::map<std::string, int>> incidents;
  int64_t incident_count = 0;
  double mean_detect = 0, mean_recover = 0;  // seconds, over closed incidents
  std::array<int64_t, 10> faults_by_class{};  // FaultClass order, then manual
  std::vector<controller::LedgerSegment> timeline;  // for the report
  std::vector<std::string> event_log;  // "t+12.000s event ...", with SimConfig::record_events
};

struct SimResult {
  std::vector<ArmResult> arms;  // bulwark first (elastic, then whole-world when both ran), then the baselines
  FleetStats fleet;
  // The whole-world restart's run on the same trace, beside an elastic arm
  // (SimConfig::compare_whole_world); empty otherwise.
  std::vector<FleetStats> whole_world;
  double cpu_seconds = 0;       // the bulwark arm's run, for events/s
};

// Over every window of `window` inside the timeline, the lowest productive
// share; exact (the minimum of a piecewise-linear function is at a
// breakpoint: a segment boundary at either end of the window).
double MinWindowEttr(const std::vector<controller::LedgerSegment>& timeline, controller::Duration window);
// The longest run of consecutive unproductive segments, in seconds.
double LongestUnproductive(const std::vector<controller::LedgerSegment>& timeline);

}  // namespace bulwark::sim
