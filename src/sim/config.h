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

#include "common/ring_layout.h"
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
  // The rest of the plane's liveness rule (controller/liveness_detector.h,
  // sim/heartbeats.h), as PlaneOptions has them: agents report every
  // report_period, the plane checks every tick_period, a machine a peer saw
  // close is lost after closed_peer_timeout, and one of a mass silence
  // after reconnect_grace (also the learned lease's ceiling).
  double report_period = 0.5;
  double tick_period = 0.25;
  double closed_peer_timeout = 2;
  double reconnect_grace = 10;
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
  // Every restart, elastic or of the whole world, is priced from the same
  // named coefficients (docs/simulator.md, "Pricing a restart"): the
  // controller's fan-out, the rendezvous (one of two paths, below), the
  // links each rank dials, the ring's hops; a whole-world restart adds a
  // process start, its communicators' set-up and a restore.
  //
  // Process start (image already on the machine, CUDA context, imports).
  // Assumed; local spawn is 0.45 s for the tiny model.
  double process_start = 15;
  // A new process's communicator set-up beyond the rendezvous and its ring
  // links (CUDA/NCCL buffers, topology discovery): whole-world restarts
  // only, survivors keep theirs. Assumed 5 s; the demo's Gloo rendezvous
  // measured ~1 s locally (bench-recovery).
  double comm_init_base = 5;
  // The controller's fan-out: one message to each placed machine's agent
  // (START_RANKS), sent one after the other. 0.35 ms: the p50 of one
  // agent's call into the real controller process, bulwark-plane-bench
  // --agents 100 at 0841833, this 2-core host. Since issue 36's fixes
  // `bulwark bench-plane --agents 12500` submits a 12,500-machine job in
  // 0.69 s, 55 us a machine (docs/control-plane.md): 0.35 ms is the
  // upper of the two.
  double fanout_per_machine = 0.35e-3;
  // One link dialled and its HELLO: 24.0 ms, the ring's whole regroup at
  // W = 4 through the store, in which a survivor dials one link
  // (bench/elastic/regroup.sh, this 2-core host, docs/recovery.md). From
  // plans the same regroup connected in 1.6 ms (flat) and 0.4 ms (two
  // levels) at W = 4, 10.0 / 11.8 ms at W = 64 (every process on the
  // host's 2 cores): 24 ms is an upper bound.
  double link_dial = 0.024;
  // Links a survivor makes at a regroup, in parallel with the others: 3
  // with the two-level ring (the trainer's default from 16 ranks) when the
  // world narrows, all of them the heir's (the survivor that takes the lost
  // rank's parts) and accepted, while every other survivor dials at most 1
  // (0da5f3d: the layout outlives the narrowing); 1 with the flat one (the
  // lost member's two neighbours dial each other), 1 in either when a
  // standby takes the lost rank: bench/elastic/regroup.sh, W = 4 to 64,
  // this 2-core host, docs/recovery.md; priced at the heir's 3, made one
  // after the other (an accept waits on its dialler as a dial does). A new process has no
  // links: it makes all of its own, up to 8 in two levels (ring_layout.h
  // LinkedRanks; the regroup bench's joiner made 5 at W = 16).
  double links_per_survivor = 3, links_per_new_rank = 8;
  // One hop of the ring: a frame to a neighbour. 30 us: an all-reduce of
  // 8 int64 over the flat ring of W = 4's 3 survivors (4 hops) took 0.12
  // ms (bench/elastic/regroup.sh, this 2-core host, docs/recovery.md): a
  // context switch on loopback, not a network's hop (~10 us in a
  // datacenter), which this host cannot measure.
  double ring_hop = 30e-6;
  // The ring's abort propagation: a failing rank sends ABORT to every ring
  // neighbour, group and cross (trainer/comm/ring.cc Ring::Fail), each
  // passes it on, so it reaches every rank within (W - 1) / 2 hops on the
  // flat ring and about (G + K) / 2 in two levels of K groups of G
  // (ring_layout.h TwoLevel, the trainer's default layout); priced at
  // abort_hops_per_rank x twice that, a bound (AbortHops).
  double abort_hops_per_rank = 1;
  // The rendezvous store as built (trainer/comm/dist.cc, ring.cc): one TCPStore
  // on rank 0, served by a single-threaded daemon; a ring costs each rank 4
  // operations (its address, the generation's nonce, its two neighbours';
  // in two levels also its group's and cross rings' neighbours', up to 9:
  // 4 is a lower bound; a whole-world Gloo mesh's W lookups a rank more),
  // and a pipeline job forms two rings per rank on it (the world's and its
  // stage's). One operation costs 41 us + 0.57 us per connected client:
  // bulwark-store-bench, this 2-core host (docs/recovery.md: 41 us at 0
  // clients, 52 at 100, 535 at 1,000, 1,188 at 2,000). Beyond 2,000
  // clients the line is an extrapolation.
  double store_ops_per_ring = 4;
  double store_op_base = 41e-6, store_op_per_client = 0.57e-6;
  // In-memory (own memory or backup peer) restore; ByteRobust: seconds.
  double restore_memory = 5;
  // Durable restore from remote storage: VAST 3.6 min median for 800B.
  double restore_durable = 216;
  // One training step (assumed 5 s for a 70B+ dense job).
  double step = 5;
  // The rendezvous a new generation uses:
  //  * kStore, as built: every rank's operations queue at the one store,
  //    so they cost store_ops x ranks x (base + per_client x ranks);
  //  * kNeighbours, as built for elastic ring jobs (issue 35 item 2,
  //    plane/actuator.cc AddRingPlans): the controller sends each rank its
  //    generation, nonce and ring neighbours' addresses with its
  //    START_RANKS; no store, nothing on a rank's path grows with W but
  //    the fan-out and the ring's hops. A whole-world job's Gloo mesh still
  //    rendezvous through the store, so the whole-world arm priced this way
  //    is what it would cost with plans, not what it costs as built.
  enum class Rendezvous { kStore, kNeighbours };
  Rendezvous rendezvous = Rendezvous::kNeighbours;

  // --- elastic data parallelism (SimConfig::recovery, docs/recovery.md) ---
  // A restart of an elastic job keeps the survivors' processes and state:
  // no process start, no communicator set-up and no restore for them, only
  // the regroup (fan-out, rendezvous, at most one link, the ring's abort
  // and handshake) and one step. A machine that joins takes a replica's
  // state from a live peer during that step (restore_memory overlaps it).
  // `regroup` >= 0 overrides the priced regroup: an assumption, and the
  // report and --json say so. -1: priced.
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

// Failure domains and time-varying faults (issue 38 item 4). Off unless
// rack_machines > 0 (`--racks R`, `--correlated` for Llama 3's 2), so that
// every figure measured before stays reproducible (the trace and its
// digest are unchanged with it off) and because a rack's size is the
// site's, not a constant: Llama 3 puts 2 machines (16 GPUs) under one
// top-of-rack switch (arXiv 2407.21783, section 3.3.1), others 4-32.
struct Domains {
  // Machines under one switch; 0: no racks, no switch faults, no infant
  // mortality.
  int rack_machines = 0;
  // Switch faults per switch-day: Llama 3's 35 switch and cable faults in
  // 54 days (Table 5; 8.4% of 419) over its 1,024 top-of-rack switches
  // (2,048 machines, 2 a rack), every one of them taken as a switch that
  // takes its rack down: an upper bound (a cable takes one machine). With
  // racks on, those 35 leave the `network` class (42 -> 7, the NICs), so
  // the fleet's fault total stays Llama 3's.
  double switch_per_rack_day = 35.0 / (1024.0 * 54.0);
  // A switch down stays down this long (replace or reboot and re-cable):
  // assumed 2 h, no published figure. Its machines then register again.
  double switch_repair = 7200;
  // Placement, the controller's (PolicyConfig::domain_aware_placement,
  // controller/domain_placement.h): aware puts each pipeline replica's
  // machines (its stages) under as few switches as the rack size allows
  // and spreads the standbys, so a rack's loss takes the fewest replicas;
  // blind places machines in id order, so one switch holds consecutive
  // slots (one stage of R replicas), what a placement that ignores racks
  // does on average (a rack of R takes R replicas). Only the first
  // placement: replacements go where the pool has them.
  bool aware = true;
  // Infant mortality: a machine new to the fleet (provisioned, or handed
  // back after a repair) fails at infant_factor times the fleet's
  // unexpected rate for its first infant_days. Assumed (no published
  // figure for GPU servers found): x3 for 14 days, i.e. ~10% of new
  // machines fail in their first two weeks. 1: none.
  double infant_factor = 3;
  double infant_days = 14;
  bool on() const { return rack_machines > 0; }
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
  // The job's recovery (controller/job.h). kAuto: elastic when the layout
  // allows it (ElasticLayout), else the whole-world restart (standby).
  // Elastic: survivors keep their state, a standby takes a lost machine's
  // slot, and with none the job trains on its whole replicas (pipelines
  // across machines included) instead of waiting.
  enum class Recovery { kAuto, kElastic, kWholeWorld };
  Recovery recovery = Recovery::kAuto;
  // With an elastic job, Simulate also runs the whole-world restart on the
  // same fault trace (the same seed) and reports both.
  bool compare_whole_world = true;
  FaultRates rates;
  Costs costs;
  controller::PolicyConfig policy;
  Domains domains;

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
  int dp() const { return tp * pp > 0 ? gpus / (tp * pp) : 0; }
  // Whether the controller accepts recovery elastic for this layout
  // (JobSpec::Validate): a lost machine takes whole replicas with it.
  bool ElasticLayout() const {
    return tp > 0 && pp > 0 && gpus_per_machine % tp == 0 && (pp == 1 || (gpus / pp) % gpus_per_machine == 0);
  }
  bool Elastic() const {
    return recovery == Recovery::kElastic || (recovery == Recovery::kAuto && ElasticLayout());
  }
  bool RegroupAssumed() const { return costs.regroup >= 0; }
  // The store is every job's fallback; plans are built for elastic jobs.
  static bool RendezvousBuilt(Costs::Rendezvous r, bool elastic) {
    return r == Costs::Rendezvous::kStore || elastic;
  }

  // A restart's price, part by part (seconds), for the report.
  struct Price {
    double fanout = 0, store = 0, links = 0, handshake = 0, abort = 0;  // the rendezvous / regroup
    double process_start = 0, comm_init = 0, restore = 0, step = 0;
    double assumed_regroup = -1;  // >= 0: --regroup replaced the parts above
    double Regroup() const {
      return assumed_regroup >= 0 ? assumed_regroup : fanout + store + links + handshake + abort;
    }
    double Total() const { return Regroup() + process_start + comm_init + restore + step; }
  };
  // The store's operations at a generation of `ranks` ranks, one after the
  // other at a single-threaded daemon with every rank connected.
  double StoreSeconds(int ranks) const {
    if (costs.rendezvous != Costs::Rendezvous::kStore) return 0;
    const double rings = pp > 1 ? 2 : 1;
    return costs.store_ops_per_ring * rings * ranks * (costs.store_op_base + costs.store_op_per_client * ranks);
  }
  // The whole world restarted on `machines_now` machines: new processes.
  Price WorldRestart(int machines_now) const {
    Price p;
    const int ranks = machines_now * gpus_per_machine;
    p.fanout = costs.fanout_per_machine * machines_now;
    p.store = StoreSeconds(ranks);
    p.links = costs.link_dial * costs.links_per_new_rank;
    p.handshake = costs.ring_hop;
    p.process_start = costs.process_start;
    p.comm_init = costs.comm_init_base;
    p.restore = costs.memory_checkpoints ? costs.restore_memory : costs.restore_durable;
    p.step = costs.step;
    return p;
  }
  // An elastic job's restart on `machines_now` machines, `joined` of them
  // new: the survivors' stall from the decision to their first step. A
  // joiner's state comes from a live peer during that step (trainer/step/elastic.h:
  // it computes no micro-batch of it), so the step waits only for the part
  // of the transfer that outlasts it.
  Price ElasticRestart(int machines_now, bool joined) const {
    Price p;
    const int ranks = machines_now * gpus_per_machine;
    p.fanout = costs.fanout_per_machine * machines_now;
    p.store = StoreSeconds(ranks);
    p.links = costs.link_dial * costs.links_per_survivor;
    p.handshake = costs.ring_hop;
    p.abort = costs.ring_hop * costs.abort_hops_per_rank * AbortHops(ranks);
    p.assumed_regroup = costs.regroup;
    p.step = joined ? std::max(costs.step, costs.restore_memory) : costs.step;
    return p;
  }
  // Twice the hops an ABORT takes to reach every one of `ranks` ranks in
  // the trainer's default layout (Costs::abort_hops_per_rank).
  static double AbortHops(int ranks) {
    const TwoLevel L = TwoLevel::For(std::max(1, ranks), 0);
    return L.flat() ? std::max(0, ranks - 1) : (L.G - 1) + (L.K - 1);
  }
  // Restart decided -> first step, with the configured restore.
  double RestartSeconds() const { return WorldRestart(machines()).Total(); }
  double ElasticRestartSeconds(int machines_now, bool joined) const {
    return ElasticRestart(machines_now, joined).Total();
  }
  // A step's time at `replicas` of the job's full width (DP), relative to full width.
  double ElasticStepFactor(int replicas) const {
    const int full = dp();
    if (!Elastic() || replicas <= 0 || replicas >= full) return 1.0;
    const double m = std::max(1.0, costs.elastic_micro_batches);
    return std::ceil(full * m / replicas) / m;
  }
};

const char* RendezvousName(Costs::Rendezvous r);
const char* RecoveryName(SimConfig::Recovery r);

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
