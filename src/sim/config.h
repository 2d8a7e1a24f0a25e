// The scale simulator's model: the fleet, the faults and what each costs.
//
// Every default below is a published figure or a local measurement; the
// source is named beside it and collected in docs/simulator.md. Times are in
// seconds of virtual time, rates per machine-day unless the name says
// otherwise. The controller's own thresholds are not here: they are the
// PolicyConfig the simulator hands to the real Controller, so a policy change
// shows in the simulation without a change to the simulator.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "controller/policy_config.h"

namespace bulwark::sim {

// How a fault shows itself to the agents, hence to the controller.
enum class FaultClass {
  kGpu,       // Xid / CUDA error: a rank exits with a hardware signature
  kHbm,       // uncorrectable ECC: a rank exits with "ecc"
  kSoftware,  // a rank raises: exit code 1, no signature
  kNetwork,   // a link stays down: NIC alerts repeat; collectives hang
  kHost,      // the machine goes down: its heartbeat stops
  kHang,      // a rank stops in a collective: no step, no exit
  kSdc,       // silent corruption: a NaN that the culprit's own values show
  kFailSlow,  // the machine computes slower than its peers
  kNicFlap,   // one NIC alert that heals by itself
};
constexpr int kNumFaultClasses = 9;
const char* FaultClassName(FaultClass c);

struct FaultRates {
  // Llama 3 405B (arXiv 2407.21783, Table 5): 419 unexpected interruptions in
  // 54 days on 16,384 GPUs = 2,048 machines x 54 days = 110,592 machine-days.
  // Each class is the sum of that table's rows that show the same way.
  static constexpr double kLlamaMachineDays = 2048.0 * 54.0;
  std::array<double, kNumFaultClasses> per_machine_day = {
      190 / kLlamaMachineDays,  // faulty GPU 148 + GPU SRAM 19 + GPU system processor 17 + thermal 6
      72 / kLlamaMachineDays,   // HBM3 72
      56 / kLlamaMachineDays,   // software bug 54 + dependency 2
      42 / kLlamaMachineDays,   // switch/cable 35 + NIC 7
      46 / kLlamaMachineDays,   // host maintenance 32, SSD 3, PSU 3, chassis, IO board, CPU, memory 2 each
      7 / kLlamaMachineDays,    // NCCL watchdog 7: a collective that never returns
      6 / kLlamaMachineDays,    // silent data corruption 6
      // Llama 3 lists none; ByteRobust Table 1 has MFU decline at 0.8% of
      // incidents: 0.8% of 419 ~ 3.4.
      3.4 / kLlamaMachineDays,
      // No published rate for flaps that heal; ByteRobust only says they are
      // common enough to need the 2-alerts-in-5-min rule. Assumed 1/100.
      0.01,
  };
  // Planned restarts (code and config updates) per day for the whole job:
  // Llama 3's 47 planned interruptions in 54 days.
  double manual_per_day = 47.0 / 54.0;
  // Benign loss spikes (an unusual batch) per day for the whole job, and
  // their size over the rolling median (log-normal): assumed, no published
  // rate. They exist so that spike_factor is tested against something: a
  // spike the detector flags is reattempted, and comes back when the same
  // batch is replayed.
  double benign_spikes_per_day = 1.0;
  double spike_median = 1.3, spike_sigma = 0.25;
};

struct Costs {
  // --- detection: fault -> the agent's event reaches the controller ---
  // ByteRobust Table 3: GPU lost or memory error in <= 10 s.
  double detect_gpu = 10, detect_hbm = 10;
  // A rank's exit is seen when the process ends (local: 0.18 s, bench-recovery).
  double detect_software = 1;
  // ByteRobust Table 3: NIC crash or port flap detected in 30 s; a link that
  // stays down alerts again every interval.
  double nic_alert_interval = 30;
  // Agent heartbeat timeout. ByteRobust's inspections take 2-60 s; 10 s is
  // assumed (the local plane uses 2 s).
  double heartbeat_timeout = 10;
  // The analyzer: every rank's stacks captured and grouped. Local: the trace
  // deadline (3 s) dominates; at 10k GPUs ~15 s is assumed.
  double stack_capture = 15;
  // NaN for the baselines (the trainer stops on a NaN loss after the bad
  // step); bulwark's NaN goes through the anomaly detector, which waits at
  // most PolicyConfig::anomaly_wait for the ranks' reports (local demo: 0.58 s).
  double detect_sdc = 2;
  // Hang, fail-slow, NaN and spike detection are the policy's own detectors
  // (controller::Monitors) reading modelled step reports, and the hang's
  // verdict is the real stack analyzer's on modelled stacks (signals.h):
  // ranks' step times vary by step_jitter (assumed; a fault-free local job's
  // worst machine measured 1.15x on a loaded host, docs/implicit-faults.md),
  // compute is compute_share of a step (assumed), and a fail-slow machine
  // computes slow_factor_min..max times its peers' time (uniform; assumed).
  double step_jitter = 0.03;
  double compute_share = 0.8;
  double slow_factor_min = 1.2, slow_factor_max = 3.0;
  // Data-parallel replicas (with all their pipeline and tensor ranks) whose
  // stacks the analyzer reads at a hang: a sample, not the whole job. Three
  // is the fewest that keeps the all-reduce waiters a strict majority over a
  // stuck replica's whole pipeline.
  int stack_sample_replicas = 3;
  // The stop-time ladder's diagnostics (compute, device, alignment) and its
  // dual-phase replay at scale: assumed (local, tiny model: 0.5 s and 16.6 s,
  // docs/ladder.md). The alignment test finds a machine that corrupts
  // silently with probability sdc_found (1.0: every local run of the
  // emulated SDC, docs/ladder.md; real corruption may hide better).
  double diagnose = 120, replay = 300;
  double sdc_found = 1.0;
  // Whether the corrupting machine's own values show the NaN (the demo's
  // `inject nan`: the anomaly detector names it and it is evicted at once),
  // or the corruption is silent (Llama 3's SDC: no culprit, reattempt, ladder).
  bool sdc_shows_locally = false;

  // --- recovery: restart decided -> first step completed ---
  // Process start (image already on the machine, CUDA context, imports).
  // Assumed; local spawn is 0.45 s for the tiny model.
  double process_start = 15;
  // Rendezvous and communicator init grow with the job: base + per machine.
  // Assumed linear (bootstrap all-gather); 1,200 machines -> 29 s, so a
  // standby swap totals ~1 min, ByteRobust's 10.87x faster than a >10 min
  // requeue at 10k GPUs.
  double comm_init_base = 5, comm_init_per_machine = 0.02;
  // In-memory (own memory or backup peer) restore; ByteRobust: seconds.
  double restore_memory = 5;
  // Durable restore from remote storage: VAST 3.6 min median for 800B.
  double restore_durable = 216;
  // One training step (assumed 5 s for a 70B+ dense job).
  double step = 5;

  // --- elastic data parallelism (SimConfig::elastic, docs/recovery.md) ---
  // A restart of an elastic job keeps the survivors' processes and state:
  // no process start and no restore for them, only the communicator and the
  // live state sync. `regroup` is that communicator's cost; -1 models what
  // bulwark-train does today, a new communicator of the whole world (the
  // comm_init figures above). A restart that brings a machine in adds
  // restore_memory for the broadcast of a replica's state from a live peer.
  double regroup = -1;
  // Micro-batches per replica of bulwark-train's --micro-batches: W of N
  // replicas take ceil(N x M / W) micro-batches each, so a step below full
  // width takes ceil(N M / W) / M steps' time. Assumed 8 (gradient
  // accumulation at scale).
  double elastic_micro_batches = 8;

  // --- checkpoints ---
  bool memory_checkpoints = true;  // bulwark: every step, in memory
  double durable_interval = 1800;  // persistence to remote storage, every 30 min
  double durable_write = 20;       // baselines' blocking save (assumed; DCP sync ~50 s/100 it on 512 H100)
  double memory_block_per_step = 0.03;  // ByteRobust: 0.01-0.04 s blocking per step

  // --- the fleet's supply ---
  // A requested standby arrives (allocated, imaged, self-checked): assumed 30 min.
  double provision = 1800;
  // Requeue: give every machine back and acquire the job again cold
  // (ByteRobust: failover > 10 min at 10k GPUs).
  double requeue = 600;
  // Reschedule one machine (torchelastic-like baseline): ByteRobust's standby
  // is 10.87x faster than requeue and 5.36x faster than reschedule, so a
  // reschedule is 5.36/10.87 of a requeue.
  double reschedule = 600 * 5.36 / 10.87;
  // Baselines: a machine down or a dead link is seen by the collective
  // timeout (PyTorch ~10 min), a hang by the NCCL watchdog (30 min).
  double baseline_timeout = 600, baseline_watchdog = 1800;
};

// A scripted fault, for replays (the demo's schedule): injected when the job
// reaches `at_step` while running. `slot` picks the machine of the placement.
struct ScriptedFault {
  int64_t at_step = 0;
  FaultClass cls = FaultClass::kGpu;
  int slot = 0;
};

struct SimConfig {
  int gpus = 9600;
  int gpus_per_machine = 8;
  int tp = 8, pp = 16;  // DP is what remains
  double days = 90;
  uint64_t seed = 1;
  // Standbys at the start: -1 = the policy's own target (Binomial quantile).
  int initial_standbys = -1;
  // Oracle: every eviction finds a standby at once (unlimited pool).
  bool oracle_standbys = false;
  // Requested standbys arrive; off for a fixed local cluster.
  bool provisioning = true;
  // Evicted machines of these classes are handed back by an operator after
  // `return_after` seconds (a replay of the demo); empty: never.
  std::vector<FaultClass> returned_classes;
  double return_after = 0;
  std::vector<ScriptedFault> script;  // non-empty: replay this, no random faults
  // > 0: a bug in the job's own code: the rank of slot `bug_slot` exits with
  // code 1 (no signature) whenever the job runs step `bug_step`, on every
  // start and whatever machine holds the slot. The policy must stop the job
  // within a bounded number of attempts and evict no machine.
  int64_t bug_step = 0;
  int bug_slot = 0;
  // > 0: the run ends when the job completes this step (a replay), not at `days`.
  int64_t total_steps = 0;
  // The job's recovery is elastic (controller/job.h): survivors keep their
  // state and train on fewer replicas when the pool is empty. Needs pp 1.
  bool elastic = false;
  FaultRates rates;
  Costs costs;
  controller::PolicyConfig policy;

  // The hang detector's first-step allowance (PolicyConfig::hang_first_step,
  // 60 s, sized for the local cluster) must outlast a restart, or every
  // restart is taken for a hang: at 12,500 machines a restart is modelled at
  // ~5 min. On: raised to twice the modelled restart where it is shorter,
  // and the report says so. Off: the policy's value as given.
  bool fit_first_step_allowance = true;
  // Keep one line per event handed to the controller (tests, debugging);
  // grows with time, so off for long runs.
  bool record_events = false;

  int machines() const { return gpus / gpus_per_machine; }
  // Restart decided -> first step, with the configured restore.
  double RestartSeconds() const {
    return costs.process_start + costs.comm_init_base + costs.comm_init_per_machine * machines() +
           (costs.memory_checkpoints ? costs.restore_memory : costs.restore_durable) + costs.step;
  }
  // An elastic job's restart on `machines_now` machines, `joined` of them
  // new: the survivors' stall from the decision to their first step. A
  // joiner's state comes from a live peer during that step (trainer/elastic.h:
  // it computes no micro-batch of it), so the step waits only for the part
  // of the transfer that outlasts it.
  double ElasticRestartSeconds(int machines_now, bool joined) const {
    const double regroup = costs.regroup >= 0 ? costs.regroup
                                              : costs.comm_init_base + costs.comm_init_per_machine * machines_now;
    return regroup + (joined ? std::max(costs.step, costs.restore_memory) : costs.step);
  }
  // A step's time at `replicas` of the job's full width, relative to full width.
  double ElasticStepFactor(int replicas) const {
    const int full = gpus / tp;
    if (!elastic || replicas <= 0 || replicas >= full) return 1.0;
    const double m = std::max(1.0, costs.elastic_micro_batches);
    return std::ceil(full * m / replicas) / m;
  }
};

// Reads overrides from JSON (the CLI converts YAML to it) on top of the
// defaults. InvalidArgument with one line naming the field and the fix:
// "faults.gpu: rate -1 is negative; give a rate >= 0 per machine-day".
Result<SimConfig> ConfigFromJson(const nlohmann::json& j, SimConfig base = {});
// When tp x pp does not divide the GPUs, lowers pp to the largest divisor
// that fits (10,000 GPUs: PP 10), so --gpus alone gives a valid layout.
void FitPipeline(SimConfig& c);
// Checks ranges; the same one-line errors.
Status Validate(const SimConfig& c);
// Every value, for the run record.
nlohmann::json ToJson(const SimConfig& c);

}  // namespace bulwark::sim
