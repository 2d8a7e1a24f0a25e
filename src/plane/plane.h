// Plane: the controller process's state and its rules of engagement with the
// world, behind one mutex. It owns the Store and the policy's Controller,
// tracks agent liveness, and keeps for every machine the command it should
// be carrying out. The gRPC service (service.h) only adapts RPCs to it.
//
// Durability: every accepted event is journaled before it is actuated, and
// Open() rebuilds the Controller by replaying the journal, so a controller
// killed at any point comes back with the same fleet, placement, incidents
// and ledger; agents reconnect and are resent their current command, which
// they ignore when they already carry it out (the job trains on meanwhile).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "bulwark.pb.h"
#include "cluster/backend.h"
#include "controller/backup_plan.h"
#include "controller/controller.h"
#include "controller/launch.h"
#include "controller/liveness_detector.h"
#include "controller/monitors.h"
#include "controller/stack_analyzer.h"
#include "common/log.h"
#include "common/mutex.h"
#include "plane/address_check.h"
#include "plane/core.h"
#include "plane/plane_options.h"
#include "plane/status_view.h"
#include "plane/store.h"
#include "plane/throughput.h"

namespace bulwark::plane {

class Plane {
 public:
  static Result<std::unique_ptr<Plane>> Open(PlaneOptions options, Time now);

  // --- agents -------------------------------------------------------------
  Status Register(const wire::RegisterRequest& req, Time now) EXCLUDES(mu_);
  // A machine the fleet moves here (a job's submit, a grant from the pool):
  // registered as it last registered, and not yet heard here, so it is
  // held to the reconnect grace, as a restarted controller's agents are,
  // until its first report reaches this plane (ReattachingLocked). At 12,500
  // agents in 100 jobs, each new job's 124 machines were held to its
  // unlearned 2 s lease at once, while the controller moved the next job's,
  // and 258 healthy ones were lost in the first minute.
  Status Handover(const wire::RegisterRequest& req, Time now) EXCLUDES(mu_);
  // Applies the events not yet applied; returns the highest seq applied.
  Result<int64_t> Report(const wire::ReportRequest& req, Time now) EXCLUDES(mu_);
  // A report from `machine` (as `incarnation`) arrived at `now`, before it
  // waits for the plane's lock, or was answered at `now`: its silence counts
  // from the later, so an agent whose report waits behind others, or whose
  // reply does, is not judged silent for the controller's own lag (issue
  // 36). Takes a small lock of its own, not mu_.
  void Heard(const std::string& machine, int64_t incarnation, Time now) EXCLUDES(heard_mu_);
  // Heard, and the report is in the controller's hands until Answered: an
  // agent with a report waiting here (in the service's queue, or for the
  // lock) is not silent, however long it waits, up to reconnect_grace. The
  // agent sends its next report only once this one is answered, so a wait
  // of ours past the lease used to read as the agent's silence (issue 36: at
  // 12,500 agents in 100 jobs, where reports waited here 1.5-1.8 s at p99,
  // 188 healthy machines were lost 2.0-2.1 s silent during the submits, a
  // few per job, under both the `no tick` and the mass-silence guards).
  void Arrived(const std::string& machine, int64_t incarnation, Time now) EXCLUDES(heard_mu_);
  void Answered(const std::string& machine, int64_t incarnation, Time now) EXCLUDES(heard_mu_);
  // Blocks until there is a command for `machine` that this stream has not
  // sent (`sent_desired` is the id of the last desired command it sent) or
  // `until` passes. A newer stream for the machine ends older ones: they get
  // nullopt with *superseded set.
  std::optional<wire::Command> NextCommand(const std::string& machine, int64_t stream,
                                           std::string* sent_desired, Time until, bool* superseded) EXCLUDES(mu_);
  int64_t OpenStream(const std::string& machine) EXCLUDES(mu_);

  // --- command streams that hold no thread (service.cc's write reactor) ---
  // A parked stream's receiving end. The plane calls it once its lock is
  // released (never under it), with the next command to write, or to say
  // that a newer stream for the machine replaced this one. Either call
  // hands the stream its turn back: it writes, or it ends.
  class CommandSink {
   public:
    virtual void Deliver(wire::Command command) = 0;
    virtual void Superseded() = 0;

   protected:
    ~CommandSink() = default;
  };
  enum class Turn { kWrite, kParked, kSuperseded, kClosed };
  // The stream's next command (kWrite, in *out) or, when there is none,
  // parks `sink` (kParked: exactly one Deliver or Superseded follows, unless
  // CloseStream takes it back). `sent_desired` is the id of the last desired
  // command the stream wrote; the plane updates it, and keeps the pointer
  // while parked. kSuperseded: a newer stream for the machine is open;
  // kClosed: CloseStream closed this one. A stream's turn is held by one
  // party at a time (its write in flight, its TakeCommand, or the plane
  // while parked), and only the holder ends the call.
  Turn TakeCommand(const std::string& machine, int64_t stream, std::string* sent_desired, CommandSink* sink,
                   wire::Command* out) EXCLUDES(mu_);
  // The stream's call is over (cancelled, or a write failed). True when it
  // was parked: its turn passes to the caller, which ends the call. Else
  // the turn's holder finds it closed at its next TakeCommand.
  bool CloseStream(const std::string& machine, int64_t stream) EXCLUDES(mu_);
  // An agent's answer to a TRACE command: its ranks' stacks.
  Status UploadStacks(const wire::StacksRequest& req, Time now) EXCLUDES(mu_);
  // Puts back a one-time command (an injection) that a closing stream could
  // not write, so the agent's next stream delivers it instead of losing it.
  void Requeue(const std::string& machine, wire::Command command) EXCLUDES(mu_);

  // --- operators ----------------------------------------------------------
  Result<std::string> Submit(JobLaunch launch, Time now) EXCLUDES(mu_);
  Status Inject(const wire::InjectRequest& req) EXCLUDES(mu_);
  // Returns a note for the operator: empty when the machine's agent is
  // alive, else why the machine will stay "joining" until it is.
  Result<std::string> ReturnMachine(const std::string& machine, Time now) EXCLUDES(mu_);
  // Releases (releases.h; plane_releases.cc). Update journals `release` as
  // the job's next one and hands it to the policy (applied now, or at the
  // next restart); it returns the release's number. Rollback goes back to
  // release `to` (0: the one before the running one).
  Result<int> Update(Release release, const JobSpec& spec, Time now) EXCLUDES(mu_);
  Status Rollback(int to, const std::string& why, Time now) EXCLUDES(mu_);
  nlohmann::json ReleasesJson() EXCLUDES(mu_);
  nlohmann::json StatusJson(Time now) EXCLUDES(mu_);
  nlohmann::json IncidentsJson() EXCLUDES(mu_);
  nlohmann::json LedgerJson(Time now) EXCLUDES(mu_);
  // Prometheus text (plane_metrics.cc), and where it is served, for status.
  std::string Metrics(Time now) EXCLUDES(mu_);
  void set_metrics_url(std::string url) EXCLUDES(mu_);

  // Detects lost agents and runs the implicit-fault detectors; called a
  // few times a second.
  void Tick(Time now) EXCLUDES(mu_);
  // The controller serves again (its port is open): a restarted one's
  // agents get their chance to re-attach from now, not from when its
  // replay began (ReattachingLocked).
  void Serving(Time now) EXCLUDES(mu_);
  // At most this many machines are lost for silence in one tick; more than
  // kMassSilence (or 1% of the fleet) silent at once get the reconnect
  // grace (controller/liveness_detector.h decides; Tick acts on it).
  static constexpr size_t kLostPerTick = LivenessDetector::kLostPerTick;
  static constexpr size_t kMassSilence = LivenessDetector::kMassSilence;

  // --- reachability (issue 40; PlaneOptions::probe_reachability) ----------
  // One machine to reach at the address it advertised, as its incarnation.
  struct ReachProbe {
    std::string machine;
    int64_t incarnation = 0;
    std::string addr;
  };
  // The machines to reach now: joining ones not yet reached, and standbys
  // last reached longer ago than reprobe_standby_every. Each is marked in
  // flight until its ProbeDone. The caller probes without the plane's lock.
  std::vector<ReachProbe> ProbesDue(Time now) EXCLUDES(mu_);
  // The probe's outcome. Reached: a joining machine joins. Not reached
  // while its agent went on reporting: it fails its self-check
  // (MachineJoined, not passed, saying why) and is evicted, never given
  // ranks. A silent agent's failed probe is not held against it: losing
  // its heartbeat says more.
  void ProbeDone(const ReachProbe& probe, const Status& reached, Time now) EXCLUDES(mu_);

  // --- one job of several on a fleet (fleet.h) ----------------------------
  // The machine leaves this plane for another job's: forgotten here (its
  // row stays in this store; Fleet::Open settles whose it is), and its
  // command stream ended, so that its agent opens the next one where the
  // fleet now routes it. Returns its registration, to be made again on the
  // plane it joins; nullopt when this plane does not know it.
  std::optional<wire::RegisterRequest> Forget(const std::string& machine) EXCLUDES(mu_);
  // The machines heard from within the heartbeat lease, in id order.
  std::vector<MachineId> LiveMachines(Time now) EXCLUDES(mu_);
  // Every machine this plane knows, registered or replayed from its store.
  std::vector<MachineId> Machines() EXCLUDES(mu_);
  bool HasJob() EXCLUDES(mu_);
  // The machines the job's full width needs; 0 before a submit.
  int MachinesNeeded() EXCLUDES(mu_);
  // How many machines the job waits for (its latest WaitForMachines, live
  // or replayed), 0 when it does not wait: a fleet reopened after a
  // controller's death offers them again without a new decision.
  int WaitingFor() EXCLUDES(mu_);
  // Whether the job's policy knows `machine` (a granted machine has joined).
  bool InJob(const MachineId& machine) EXCLUDES(mu_);

 private:
  struct Agent {
    std::string dir;
    bool stored = false;  // its row (dir, shard_addr) is in the store as they are here
    int64_t incarnation = 0;
    int64_t acked_seq = 0;
    // When it was last heard, whether it is lost and whether it is held to
    // the lease or the grace: liveness_'s (LivenessDetector).
    bool reported = false;  // a report since it registered here: its holdings are known
    std::vector<int> live_ranks;
    int64_t generation = 0;
    // In-memory checkpoints: where its shard server listens (from Register,
    // kept in the store) and the shard copies it last reported holding
    // (replaced by every report: runtime observations, not journaled;
    // after a controller restart they return with the next reports).
    std::string shard_addr;
    // Its failure domain as its registration says ("" none): carried to the
    // policy in MachineJoined and the job's creation (policy_domains.cc).
    std::string domain;
    // Its ring slots as its registration says (RegisterRequest.ring_addr),
    // for an elastic job's ring plans (actuator.h: AddRingPlans); runtime.
    std::string ring_addr;
    std::vector<ShardHolding> shards;
    std::string device_slowdown;  // the device's fail-slow hint, "" none (runtime, not journaled)
    // Its ranks of `generation` that exited 0 -> the last step each was seen
    // to complete (replaced by every report, like shards).
    std::map<int, int64_t> finished;
    // Peer addresses whose end of its ranks' connections closed (replaced
    // by every report, like shards; bulwark.proto: peers_closed).
    std::vector<std::string> peers_closed;
    std::optional<wire::Command> desired;
    std::deque<wire::Command> oneshots;
    int64_t stream = 0;  // the newest command stream's number
    bool stream_closed = false;  // CloseStream ended `stream`
    // The newest stream, parked until there is something to write.
    struct Parked {
      int64_t stream = 0;
      CommandSink* sink = nullptr;
      std::string* sent_desired = nullptr;
    };
    std::optional<Parked> parked;
    // Reachability (ProbesDue): a probe in flight since `probe_started`;
    // `reached` a joining machine's proof, consumed by its join;
    // `probed_at` when its last probe ended.
    bool probing = false;
    bool reached = false;
    Time probe_started{};
    Time probed_at{};
  };

  // A stack capture in flight (one at a time: one job, one open incident).
  struct Trace {
    std::string id;
    int64_t incident = 0;
    Time started{};  // the TRACE commands queued: every machine's upload begins
    bool crowds = false;  // asked of capture_crowds machines or more
    Time deadline{};
    Placement placement;
    std::set<MachineId> waiting;  // machines that have not answered
    std::vector<RankStack> stacks;
  };

  explicit Plane(PlaneOptions o)
      : options_(std::move(o)),
        cluster_policy_(options_.policy),
        monitors_(std::make_unique<Monitors>(options_.policy)),
        liveness_(LivenessOptions{options_.heartbeat_timeout, options_.closed_peer_timeout, options_.reconnect_grace}) {}
  // Holds mu_ for its scope and, once it has released it, runs what was
  // deferred under it (deliveries to parked streams): the plane never
  // calls out with its lock held.
  class SCOPED_CAPABILITY PlaneLock {
   public:
    // `first`: the liveness tick, which the stream of reports must not
    // starve (std::mutex is not fair: at 12,500 reports/s the tick waited
    // seconds, and a silent machine's silence was not counted meanwhile).
    // Others wait while a `first` caller waits.
    // `who` names the holder in the log line of a long hold.
    explicit PlaneLock(Plane* p, bool first = false, const char* who = __builtin_FUNCTION()) ACQUIRE(p->mu_)
        : p_(p), who_(who) {
      if (first) {
        p_->first_waiting_.fetch_add(1);
      } else {
        while (p_->first_waiting_.load(std::memory_order_relaxed) > 0) std::this_thread::yield();
      }
      p_->mu_.Lock();
      if (first) p_->first_waiting_.fetch_sub(1);
      held_since_ = std::chrono::steady_clock::now();
    }
    ~PlaneLock() RELEASE() {
      p_->mu_.AssertHeld();
      std::vector<std::function<void()>> run;
      run.swap(p_->deferred_);
      const auto held = std::chrono::steady_clock::now() - held_since_;
      p_->mu_.Unlock();
      for (std::function<void()>& f : run) f();
      // Every report and the liveness tick wait while the lock is held: a
      // long hold is the controller's own lag, and is named (issue 36).
      if (held > kLongHold) p_->LogLongHold(who_, held);
    }
    PlaneLock(const PlaneLock&) = delete;
    PlaneLock& operator=(const PlaneLock&) = delete;

   private:
    Plane* const p_;
    const char* const who_;
    std::chrono::steady_clock::time_point held_since_;
  };
  static constexpr Duration kLongHold = std::chrono::milliseconds(200);
  void LogLongHold(const char* who, std::chrono::steady_clock::duration held) EXCLUDES(mu_);
  // The command a stream that last wrote desired command `*sent_desired`
  // should write next, if any (a one-shot first); updates *sent_desired.
  std::optional<wire::Command> NextForStreamLocked(Agent& a, const std::string& machine, std::string* sent_desired)
      REQUIRES(mu_);
  // A machine's mailbox changed: its parked stream, if it has something to
  // write now, is handed it (after the lock is released), and blocking
  // NextCommand callers wake. WakeStreamsLocked: every machine's.
  void WakeStreamLocked(const std::string& machine, Agent& a) REQUIRES(mu_);
  void WakeStreamsLocked() REQUIRES(mu_);
  // --- an agent's report (Report), one job each ---
  // The agent of `req`, registered under the incarnation it reports as.
  Result<Agent*> ReportingAgentLocked(const wire::ReportRequest& req) REQUIRES(mu_);
  // What the report says of the machine: heard now, its ranks, generation,
  // shard holdings and device hint. True when it had been reported lost.
  bool NoteReportLocked(const std::string& machine, Agent& a, const wire::ReportRequest& req, Time now) REQUIRES(mu_);
  // A machine the job has not seen, or one an operator returned, joins by reporting.
  void JoinIfNewLocked(const MachineId& machine, bool was_lost, Time now) REQUIRES(mu_);
  // One new event of the agent's: journaled and decided, or dropped as a
  // stale step or an echo. An error only when the journal failed.
  Status ApplyAgentEventLocked(const MachineId& machine, int64_t incarnation, const wire::AgentEvent& ev, Time now) REQUIRES(mu_);
  // The ranks' step signals and phases into the detectors, then a check.
  void ObserveSignalsLocked(const wire::ReportRequest& req, Time now) REQUIRES(mu_);
  Status RebuildLocked(Time now) REQUIRES(mu_);
  // Counts the reports Heard since the last call as heard (Tick, Submit).
  void AbsorbArrivalsLocked(Time now) REQUIRES(mu_);
  // After a restart, until every agent it knows has re-attached or none has
  // for reconnect_grace: then the controller, working through thousands of
  // registrations at once, is what is slow (issue 36: at 12,500 agents the
  // last ones registered 28 s after it served, and the first ones, held to
  // the 2 s lease while it did, were evicted 2.1 s after registering). So an
  // agent not yet back counts as heard when the latest one came back, and
  // one back is held to the reconnect grace, not the lease, meanwhile.
  bool ReattachingLocked(Time now) REQUIRES(mu_);
  // A START_RANKS replayed from the journal has no restore sources; each
  // machine's is held until every machine of the placement has reported
  // its holdings, or reconnect_grace since the controller began serving
  // (plane_liveness.cc). HoldReplayedStartsLocked ends the hold (Tick).
  bool HeldLocked(const wire::Command& c) const REQUIRES(mu_);
  void HoldReplayedStartsLocked(Time now) REQUIRES(mu_);
  // The first word from `machine`'s agent since it registered or this
  // controller started. True when it had been lost.
  bool BackLocked(const std::string& machine, Time now) REQUIRES(mu_);
  // Time in which the controller could not hear its agents (a stall of its
  // own, a large stack capture's flood) is nobody's silence: every
  // machine's last word moves `d` later, never past `now`.
  void CreditSilenceLocked(Time now, Duration d) REQUIRES(mu_);
  // The lease a reporting machine's silence is held to (liveness_.Lease:
  // learned from the gaps between reports, at least heartbeat_timeout, at
  // most reconnect_grace). Logged when it moves by half a second or more.
  Duration LeaseLocked(Time now) REQUIRES(mu_);
  // Whether `machine` is lost (reported lost for its silence, not heard since).
  bool LostLocked(const std::string& machine) const REQUIRES(mu_) { return liveness_.Lost(machine); }
  Time LastHeardLocked(const std::string& machine) const REQUIRES(mu_) { return liveness_.LastHeard(machine, last_now_); }
  // Analyzes what the trace gathered, keeps the raw stacks for people and
  // hands the verdict to the policy.
  void FinishTraceLocked(Time now) REQUIRES(mu_);
  // Runs the detectors and handles what they found.
  void CheckMonitorsLocked(Time now) REQUIRES(mu_);
  // A job ends when its program does, whatever it printed: once every rank
  // of the current placement has exited 0 (as its machine's agent last
  // reported), the job is complete at the last step seen, the highest of
  // the job's progress, any rank's signalled step and the finished ranks'.
  // A rank that exits 0 while others train is waited for: until the last
  // one ends the job runs and is protected as before, so a rank that then
  // fails or hangs is an ordinary incident, and its restart starts every
  // rank again, the finished ones too (a program that resumes at its end
  // exits 0 again at once, and completes the job then).
  Status CompleteIfEveryRankExitedLocked(Time now) REQUIRES(mu_);
  // Journals the job's completion at `step` (`why` for people) and stops
  // protecting it: its ranks' exits and its machines' faults are no longer
  // incidents.
  Status CompleteLocked(int64_t step, const std::string& why, const nlohmann::json& origin, Time now) REQUIRES(mu_);
  Time NowLocked(Time now) REQUIRES(mu_);
  // Journals, hands to the policy and actuates; the only path for events.
  // Logs every failure itself (a refusal, the journal, what follows the
  // journaled decision), so a caller that has no one to tell may use Feed.
  Status HandleLocked(const Event& e, Time now, const nlohmann::json& origin) REQUIRES(mu_);
  // HandleLocked for events nobody waits on (an agent's report, the tick).
  void FeedLocked(const Event& e, Time now, const nlohmann::json& origin) REQUIRES(mu_);
  // Events observed together, decided as one (Controller::HandleAll) and
  // journaled as one row: a switch's machines lost in one tick.
  void FeedAllLocked(const std::vector<Event>& events, Time now) REQUIRES(mu_);
  // Appends one row to the journal. A failure is sticky (journal_error_):
  // the policy's state may have moved past what the journal can replay, so
  // the plane decides nothing more until it is restarted.
  Status JournalLocked(const nlohmann::json& record, Time now) REQUIRES(mu_);
  Status AfterDecisionLocked(const std::vector<Action>& actions, bool deliver, Time now) REQUIRES(mu_);
  // While the job runs, every idle standby's desired state is a STOP_RANKS
  // that carries the job's command (actuator.h: WarmStandby): its agent
  // keeps a spare of the job set up, so that a swap to it costs a
  // rendezvous and a restore, not a process start (docs/recovery.md).
  void WarmStandbysLocked() REQUIRES(mu_);
  // One-shots (plane_oneshots.cc): a RunDiagnostics action's DIAGNOSE for
  // each of its machines, with their replay groups or network links; a
  // Checkup's for its evicted machine, or an AlignCheck's for every machine
  // of its placement, beside the ranks.
  void SendDiagnoseLocked(const Action& a) REQUIRES(mu_);
  void SendTestsLocked(const Action& a) REQUIRES(mu_);
  // The job's policy: the cluster's with `launch`'s own fields laid over it,
  // and detectors made afresh for it (at submit, and at replay before the
  // journal). An invalid field is the error, and nothing changes.
  Status ApplyJobPolicyLocked(const JobLaunch& launch) REQUIRES(mu_);
  // Queues a StageRelease action's STAGE_RELEASE one-shot for each of its
  // machines, with the release's command as its restart will carry it.
  void SendStageReleaseLocked(const Action& a) REQUIRES(mu_);
  // Drops the step rows replay can do without, once replaying what is left
  // is verified to give the same state (journal_compaction.h).
  Status CompactJournalLocked(Time now) REQUIRES(mu_);
  Status SaveSnapshotsLocked(Time now) REQUIRES(mu_);
  // The job's part of the status view (status_view.h): copied under the
  // lock, rendered after it.
  StatusView::Job JobViewLocked(Time now) REQUIRES(mu_);
  // What the cluster manager records of an eviction (Slurm's node Reason):
  // "job NAME incident N: why", the job's and the incident's parts where known.
  std::string DrainReasonLocked(int64_t incident, const std::string& why) REQUIRES(mu_);
  nlohmann::json IncidentsLocked() REQUIRES(mu_);
  nlohmann::json LedgerLocked(Time now) REQUIRES(mu_);
  Agent& AgentForLocked(const std::string& machine) REQUIRES(mu_);
  // The job's launch with release `number`'s command and environment.
  JobLaunch LaunchForLocked(int number) const REQUIRES(mu_);
  // Sends ReleaseDue and RequeueDue when their times come (from Tick).
  void ReleaseAndRequeueTimersLocked(Time now) REQUIRES(mu_);
  // Tells the cluster manager about a delivered decision (plane_backend.cc).
  void ActuateBackendLocked(const Action& a) REQUIRES(mu_);
  // After a restart: every evicted machine is drained, in case the drain
  // was still pending when the previous controller died.
  void ReconcileBackendLocked() REQUIRES(mu_);
  // Backup peers and restore sources for `placement` from what the agents
  // last reported; a lost agent's holdings are not offered as sources.
  BackupPlan PlanLocked(const Placement& placement) const REQUIRES(mu_);
  // PlanLocked for the current placement, with each machine's slots, kept
  // until the next decision or a change in what the agents hold or where
  // they listen (routes_version_). A START_RANKS delivered stream by stream
  // and every status asked for it once per machine, each O(N): O(N^2) at
  // N machines (issue 36).
  struct Routes {
    int64_t version = -1;
    int64_t generation = -1;
    BackupPlan plan;
    std::unordered_map<MachineId, std::vector<size_t>> slots_of;
  };
  const Routes& CurrentRoutesLocked() REQUIRES(mu_);
  // What the routes are made of changed: the cached ones are stale.
  void RoutesChangedLocked() REQUIRES(mu_) { ++routes_version_; }
  // Where ranks led by `machine` rendezvous: the machine's own address when
  // it has one of its own (its shard server's host, a network namespace of
  // the local backend or a real host), else the launch's (loopback).
  std::string MasterAddrLocked(const MachineId& machine) const REQUIRES(mu_);
  // The machine of the current placement that advertised the host of
  // `addr` ("host:port"), "" when none or several did (the local backend
  // without namespaces puts every machine on 127.0.0.1: no one to blame).
  MachineId OwnerOfAddressLocked(const std::string& addr) const REQUIRES(mu_);
  // Machine -> the latest time an agent (another, not lost) was heard that
  // names the machine's address among the peers whose connections closed.
  // Tick asks it of every silent machine: one pass over the agents, where
  // asking each of them was O(N^2) (3-4 s under the lock at 12,500 agents
  // after a restart, when every agent is silent for a while).
  std::unordered_map<MachineId, Time> ClosedSeenLocked() const REQUIRES(mu_);
  void LogLocked(const std::string& line) REQUIRES(mu_);

  PlaneOptions options_;  // options_.policy: the job's (ApplyJobPolicyLocked)
  const PolicyConfig cluster_policy_;
  std::unique_ptr<Monitors> monitors_ GUARDED_BY(mu_);
  int last_wait_ GUARDED_BY(mu_) = 0;  // the latest WaitForMachines's count
  Throughput throughput_ GUARDED_BY(mu_);  // the job's tokens/s, for /metrics
  Logger log_{"controller"};
  std::optional<Trace> trace_ GUARDED_BY(mu_);
  // The latest RunDiagnostics decided, replayed ones included: a controller
  // restarted while the ladder waits for it sends it again (the agents
  // ignore a command id they already ran), instead of waiting out the
  // budget for answers from machines whose command died with the old one.
  std::optional<Action> diagnose_decided_ GUARDED_BY(mu_);
  Mutex mu_;
  std::atomic<int> first_waiting_{0};  // PlaneLock callers with priority, waiting
  CondVar changed_;
  // Report arrivals not yet seen by Tick (Heard): machine -> (incarnation,
  // time). Taken under mu_ by Tick, alone by Heard.
  Mutex heard_mu_;
  std::unordered_map<std::string, std::pair<int64_t, Time>> heard_ GUARDED_BY(heard_mu_);
  // Reports Arrived and not yet Answered: machine -> its incarnation, how
  // many, and when the oldest of them arrived.
  struct InFlight {
    int64_t incarnation = 0;
    int count = 0;
    Time since{};
  };
  std::unordered_map<std::string, InFlight> in_flight_ GUARDED_BY(heard_mu_);
  std::unique_ptr<JournalStore> store_ GUARDED_BY(mu_);
  std::optional<Controller> controller_ GUARDED_BY(mu_);
  std::optional<JobLaunch> launch_ GUARDED_BY(mu_);
  // Releases 2.. as journaled; release 1 is launch_ itself.
  std::map<int, Release> releases_ GUARDED_BY(mu_);
  std::map<std::string, Agent> agents_ GUARDED_BY(mu_);
  int64_t next_stream_ GUARDED_BY(mu_) = 1;
  Time last_now_ GUARDED_BY(mu_){};
  Time started_ GUARDED_BY(mu_){};
  std::optional<Time> last_tick_ GUARDED_BY(mu_);
  // While a restarted controller's agents re-attach: when it began serving,
  // and when the latest agent came back (ReattachingLocked).
  std::optional<Time> serving_at_ GUARDED_BY(mu_);
  std::optional<Time> reattach_at_ GUARDED_BY(mu_);
  struct ReplayedHold {
    Time since;          // the rebuild, then when the controller began serving
    int64_t generation;  // the replayed placement's
  };
  std::optional<ReplayedHold> replayed_hold_ GUARDED_BY(mu_);  // HeldLocked
  // Which silent machines are lost: fed every agent's reports, asked by
  // Tick. Has a record for every agent in agents_ (AgentForLocked, Forget).
  LivenessDetector liveness_ GUARDED_BY(mu_);
  Duration lease_logged_ GUARDED_BY(mu_){0};
  std::optional<int64_t> done_step_ GUARDED_BY(mu_);
  std::string done_why_ GUARDED_BY(mu_);  // how it ended, for status (journaled with the done row)
  // The highest step any rank signalled (the job's progress is rank 0's; a
  // rank may go further before it ends). Runtime only, like the signals.
  int64_t highest_step_ GUARDED_BY(mu_) = 0;
  // A rank of the job said INPLACE (its agent's report): warm standbys keep
  // spares of any program from then on (WarmStandbysLocked). Runtime only:
  // a rebuilt controller hears it again with the next report.
  bool ranks_wait_in_place_ GUARDED_BY(mu_) = false;
  std::set<std::string> logged_actions_ GUARDED_BY(mu_);
  std::string metrics_url_ GUARDED_BY(mu_);  // "" when metrics are not served
  Status journal_error_ GUARDED_BY(mu_);  // sticky: set once, the plane decides nothing more
  // Journal rows appended since the last compaction; compaction runs every
  // kCompactEvery of them (a few hours of steps) and at every start.
  int64_t appended_since_compaction_ GUARDED_BY(mu_) = 0;
  static constexpr int64_t kCompactEvery = 20000;
  // Standby shortfall already asked of the backend since the pool's last
  // arrival: a growing shortfall asks only for the difference.
  int64_t backend_arrivals_ GUARDED_BY(mu_) = -1;
  int backend_asked_ GUARDED_BY(mu_) = 0;
  std::set<std::string> backend_done_ GUARDED_BY(mu_);  // action ids told already: repeats are no-ops
  std::optional<Routes> routes_ GUARDED_BY(mu_);
  // Run by PlaneLock once mu_ is released.
  std::vector<std::function<void()>> deferred_ GUARDED_BY(mu_);
  int64_t routes_version_ GUARDED_BY(mu_) = 0;
};

}  // namespace bulwark::plane
