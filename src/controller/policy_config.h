// Every threshold the policy uses, with the defaults it ships with.
#pragma once

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "common/spike_rule.h"
#include "common/status.h"
#include "controller/event.h"
#include "controller/ladder.h"
#include "controller/time.h"

namespace bulwark::controller {

struct PolicyConfig {
  // NIC flaps usually heal; ByteRobust evicts only after 2 alerts in 5 min.
  int network_alerts_to_evict = 2;
  Duration network_alert_window = std::chrono::minutes(5);

  // Software crashes (no machine indicated) within this window are looked at
  // together: a second one on the same machine evicts it.
  Duration crash_window = std::chrono::minutes(10);
  // Crashes within the window with no step completed in between that stop
  // the job: restarts are bounded by progress, not by count alone.
  int max_crashes_without_progress = 3;
  // ...plus the crashes that chance explains in a job this size: unrelated
  // faults land inside one restart of 12,500 machines (one every ~35 min, a
  // restart ~5 min), and counting them as a loop stopped healthy jobs in the
  // simulator. The bound is this quantile of Binomial(machines,
  // daily_failure_rate x time since the last step); a 4-machine job gets 0
  // extra, a 12,500-machine job a few (crash_attribution.h).
  double crash_loop_quantile = 0.999;

  // Log signatures that name the machine's hardware: evict at once. "nccl"
  // alone is not one: every surviving rank reports an NCCL error when one
  // peer dies, so it would evict healthy machines; the agent reports
  // "nccl_hardware" when the NCCL error names a local link or device.
  std::set<std::string> hardware_signatures = {"xid", "ecc", "cuda_error", "nccl_hardware"};
  // Failed inspections that evict at once. A failed process inspection says
  // the training process, not the machine, is in trouble: it is handled
  // like a crash of that machine's ranks.
  std::set<InspectionKind> evicting_inspections = {InspectionKind::kDevice, InspectionKind::kDisk,
                                                   InspectionKind::kMemory};

  // Standby pool target: the `standby_quantile` of Binomial(N, p) for N
  // machines in the job and p this per-machine daily failure rate.
  double daily_failure_rate = 0.005;
  double standby_quantile = 0.99;

  // An elastic job training on fewer machines than it asked for grows onto
  // a standby once the standby says it holds spares of the job
  // (StandbyReady), so the replicas that train stall for the regroup only,
  // not for the joiner's process start. A standby that has not said so
  // within this long is taken as it is (an agent that never answers must
  // not keep the job narrow). 0: take standbys at once.
  Duration standby_ready_wait = std::chrono::seconds(30);

  // Releases (releases.h): a lazy release waits for the next restart at
  // most this long, then restarts the job in place (ByteRobust's 24 h).
  Duration update_force_after = std::chrono::hours(24);
  // An urgent release (`update --now`) is staged first: every machine sets
  // up processes of it beside the running ranks, which train on, and the
  // restart hands the ranks to them. It waits at most this long for the
  // machines' answers, then restarts anyway (cold where not staged). 0:
  // restart at once, cold.
  Duration release_stage_timeout = std::chrono::seconds(60);
  // A crash with a code-error signature, or a crash loop, within this long
  // of a release taking effect rolls back to the release before it instead
  // of stopping the job.
  Duration rollback_window = std::chrono::minutes(30);

  // Failure domains (a rack under one switch; MachineStatus::domain). This
  // many machines of one domain whose heartbeats stop within
  // domain_burst_window of each other are one incident that names the
  // domain ("switch r1: 4 machines lost"): their peers' connection errors
  // count toward no crash loop and no code-vs-machine attribution, and
  // nothing outside the domain is evicted for it. 0: no domain rule.
  int domain_burst_machines = 2;
  Duration domain_burst_window = std::chrono::seconds(30);
  // The domain's machines come back when their agents register again with
  // a passed self-check (the check), as standbys (the return). A second
  // loss of the domain within this long of its return is a flapping
  // switch (the probation): its machines are evicted for good, and only an
  // operator returns them.
  Duration domain_probation = std::chrono::hours(1);
  // A job's first placement takes domains into account (domain_placement.h):
  // a pipeline replica under one switch where the switch holds that many
  // machines, the standbys spread over the domains. Off: machines in id order.
  bool domain_aware_placement = true;

  // The sliding window of the ETTR ledger.
  Duration ledger_window = std::chrono::hours(1);

  // Over-eviction the pool can absorb: when a hang's or a slow machine's
  // parallel group is larger than the standbys at hand, evict only the
  // machines that stand out (the outlier ranks' machines, the culprit) and
  // keep the rest under watch. A whole 16-machine pipeline evicted into a
  // pool of 12 idled a simulated 9,600-GPU job for a 30-minute provisioning
  // wait (its worst hour 47%); if the narrowed choice was wrong, the fault
  // comes back and the next verdict names the machine that stands out then.
  bool narrow_to_pool = true;

  // What is over-evicted on suspicion comes back (issue 38 item 5): each
  // machine of a hang's, a slow machine's or an anomaly's group is checked
  // off the job's path (a Checkup action: the ladder's tests on that one
  // machine) and, when every test passes, returns to the pool as a standby.
  // A failed test leaves it evicted, for an operator. The plane sends the
  // tests as a DIAGNOSE one-shot to that machine (Plane::SendTestsLocked).
  // On by default: without it a fifth of a 100k fleet's machines a year
  // left for good on suspicion alone (docs/failure-domains.md); `bulwark
  // sim --no-checkup` or `checkup_evicted: 0` turns it off.
  bool checkup_evicted = true;
  // A rack's machines back after its switch, when their loss was an
  // incident, get the same checkup before they serve (with checkup_evicted).
  // Off by default: on the local cluster the DIAGNOSE sent at a returning
  // agent's first report was never run (racks_cluster_test, 2026-11-27:
  // m03 and m04 logged no diagnostics in 120 s), and a standby that never
  // started ranks fails the alignment test (no trainer command known), so
  // the rack never came back. Off, the rack returns on its self-check.
  bool checkup_domain_return = false;
  std::vector<std::string> checkup_tests = {"compute", "device", "alignment"};

  // --- implicit faults: the detectors (hang_detector.h, fail_slow_detector.h,
  // anomaly_detector.h) and what follows them ---

  // Hang: no step within max(hang_factor x the learned step time,
  // hang_floor). The learned time is the median of the last `hang_window`
  // step durations the ranks reported. The first step after a (re)start
  // gets hang_first_step (process start, rendezvous, restore); a phase a
  // rank announces (evaluation, a disk checkpoint) gets its own estimate
  // times hang_factor, at least hang_floor.
  double hang_factor = 5.0;
  Duration hang_floor = std::chrono::seconds(2);
  Duration hang_first_step = std::chrono::seconds(60);
  // The first steps after a start keep that allowance: they pay one-time
  // costs (the first checkpoint copies, a new backup peer's first full
  // transfer, warm-up) that a learned step time would call a hang.
  int hang_warmup_steps = 5;
  int hang_window = 50;
  // How long the agents get to send the ranks' stacks after a hang is
  // suspected; ranks without a stack by then count as outliers.
  Duration trace_deadline = std::chrono::seconds(3);
  // A rank process stopped (T) or in uninterruptible sleep (D) this long is
  // a process inspection failure (the agent judges; START_RANKS carries it).
  Duration process_stuck = std::chrono::seconds(10);

  // Fail-slow (ByteRobust: aggregate every 10 s, evict after 5 rounds): every
  // `slow_round`, each machine's mean compute time per step is compared with
  // the median of the others'; the same machine the most outlying
  // `slow_rounds` rounds running, the median of its ratios over them at
  // least `slow_ratio`, is over-evicted. A round needs `slow_min_steps`
  // steps from every machine. A median `slow_jobwide_ratio` times the job's
  // best round with no outlier is a job-wide slowdown: recorded, nothing
  // evicted. 1.3x: the worst machine of a fault-free 4-machine job on a
  // loaded 2-core host measured up to 1.15x in a round
  // (docs/implicit-faults.md; 1.25x at load 7-15 in one 12-minute run with
  // the median rule, flagging nobody), and a 2x slow machine measures
  // 1.8-2.0x by device time (its ranks' CPU time on a CPU host, 2026-12-07).
  Duration slow_round = std::chrono::seconds(10);
  int slow_rounds = 5;
  double slow_ratio = 1.3;
  // A machine mildly slow for long: the median of its own ratios over the
  // last `slow_long_rounds` rounds (5 min) at least `slow_long_ratio`. Under
  // slow_ratio a round's noise hides it, and 5-8 such machines a year at
  // 100k GPUs each slowed every step for the rest of their job: with this
  // rule the simulator's elastic progress rose 0.4-1.9 points (100k GPUs x
  // 365 days, seeds 1-5). Over 30 rounds the noise averages out; 1.15x sits
  // above a fault-free job's worst machine (docs/implicit-faults.md). 0: off.
  int slow_long_rounds = 30;
  double slow_long_ratio = 1.15;
  int slow_min_steps = 3;
  double slow_jobwide_ratio = 1.5;
  // Steps this many times the job's best round, of which compute explains
  // under a quarter of the added time, slow_rounds rounds running: the job
  // waits on its network, and the ladder's network test measures every
  // link (a stop of seconds) to evict the machine on the slow ones. 3x:
  // in a 20 min fault-free soak under a -j2 build loop (load 6.6-8.6 on 2
  // cores, 4 tiny ranks) no 10 s window's steps reached 2.1x the best, and
  // none at 2x had compute under a quarter of it; a link slowed 20x on one
  // of four machines made the steps 12-13x slower with compute within
  // 1.13x (tests/cluster/netns_cluster_test.cc). 0: off.
  double slow_link_ratio = 3.0;

  // NaN and spikes (ByteRobust: a 5x jump over the rolling median, or NaN).
  // A rank's loss or grad norm above spike_factor x the median of the last
  // `spike_window` steps (once spike_min_history are known) is a spike. The
  // reports of every rank for the anomalous step are awaited at most
  // `anomaly_wait` to tell a culprit (its local gradients non-finite while
  // others' are finite) from a job-wide anomaly.
  double spike_factor = SpikeRule().factor;
  int spike_window = SpikeRule().window;
  int spike_min_history = SpikeRule().min_history;
  // The three as the rule the trainer applies too (the agent hands it on).
  SpikeRule spike_rule() const { return {spike_factor, spike_window, spike_min_history}; }
  Duration anomaly_wait = std::chrono::seconds(2);

  // Crash signatures that blame the job's code, never a machine (a missing
  // command, an import or syntax error): a repeat anywhere stops the job.
  std::set<std::string> user_code_signatures = {"command_not_found", "import_error", "syntax_error"};

  // The stop-time ladder: rungs, tests and budgets (ladder.h).
  LadderConfig ladder;

  // InvalidArgument naming the first field out of range.
  Status Validate() const;
};

}  // namespace bulwark::controller
