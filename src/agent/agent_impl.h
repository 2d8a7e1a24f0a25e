// Agent: the per-machine agent's state and loops, in three rooms: agent.cc
// (the main loop, the controller link, fencing, metrics), agent_observe.cc
// (what it sees of its ranks and its machine: exits, steps, the rank links,
// inspections, sent up as events) and agent_commands.cc (carrying out the
// controller's commands; agent_staging.cc for staged releases). Private to
// src/agent; agent.h is the public entry point (RunAgent).
#pragma once
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "agent/agent_metrics.h"
#include "agent/clock.h"
#include "agent/diagnostics.h"
#include "agent/echo_hold.h"
#include "agent/exit_watcher.h"
#include "agent/inspector.h"
#include "agent/monitor.h"
#include "agent/rank_link_server.h"
#include "agent/tracer.h"
#include "agent/shard_store.h"
#include "agent/signatures.h"
#include "agent/supervisor.h"
#include "agent/timing.h"
#include "agent/workers.h"
#include "bulwark.grpc.pb.h"
#include "rank_client/shard_socket.h"
#include "cluster/layout.h"
#include "cluster/tls.h"
#include "common/exit_codes.h"
#include "common/files.h"
#include "common/log.h"
#include "common/metrics_server.h"
#include "common/mutex.h"
#include "common/progress_pattern.h"
#include "common/token.h"
#include "agent/agent.h"

namespace bulwark::agent {
namespace detail {


using Clock = std::chrono::system_clock;
// kLoopPeriod, kPeerLostGrace, kReportPeriod, kCallDeadline: agent/timing.h.
// How long a START_RANKS waits for the previous generation's ranks on this
// machine to say they lost their peers before it stops them (handoff.h): a
// dead peer's closed sockets fail their collective within milliseconds; a
// rank still silent after this is hung or computing, and is replaced.
constexpr auto kRejoinWait = std::chrono::milliseconds(1000);
constexpr auto kInspectPeriod = std::chrono::milliseconds(1000);
constexpr auto kStreamDeadline = std::chrono::seconds(30);
// A rank stopped (T) or in uninterruptible sleep (D) this long is reported
// as a failed process inspection, until a START_RANKS says otherwise
// (PolicyConfig::process_stuck, which it carries).
constexpr auto kProcessStuck = std::chrono::seconds(10);


inline std::atomic<bool> g_stop{false};
inline void OnSignal(int) { g_stop = true; }

inline int64_t Ms(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

// The agent's logger, "agent.<machine>" (common/log.h): RunAgent names the
// machine before anything is logged.
inline std::string g_log_machine = "unnamed";
inline const Logger& AgentLog() {
  static const Logger log("agent." + g_log_machine);
  return log;
}
inline void Log(const std::string& line) { AgentLog().Info(line); }
inline void LogWarn(const std::string& line) { AgentLog().Warn(line); }

class Agent {
 public:
  Agent(AgentOptions o, std::string token, SignatureTable sigs, std::unique_ptr<ShardStore> shards,
        std::unique_ptr<RankLinkServer> links)
      : o_(std::move(o)), clock_(o_.clock ? o_.clock : std::make_shared<WallClock>()), layout_{o_.dir}, token_(std::move(token)), sigs_(std::move(sigs)),
        supervisor_(layout_.ranks(o_.machine)), incarnation_(Ms(Now())), shards_(std::move(shards)),
        links_(std::move(links)) {
    const cluster::EmulatedHardware hw = cluster::HardwareOf(o_.dir, o_.machine);
    health_paths_.device = hw.device;
    health_paths_.nic = hw.nic;
    health_paths_.disk = layout_.machine(o_.machine);
    health_paths_.interface = o_.nic;
    health_paths_.alu = hw.alu;
    health_paths_.link = hw.link;
    health_paths_.sdc = hw.sdc;
    health_paths_.pace = hw.pace;
    gpu_ = GpuHealth::Open(Nvml::LibraryPath(), [](const std::string& line) { Log(line); });
  }

  Status Run();

  // Serves GET /metrics (agent_metrics.h) on 127.0.0.1:`port`; port < 0:
  // the port recorded in machines/ID/agent.metrics by an earlier start, so
  // that a restarted agent keeps its scrape target, else any free port.
  // Records the URL and a file_sd target list beside agent.log. A port that
  // cannot be bound is logged and the agent runs without metrics:
  // protecting the job comes first.
  void ServeMetrics(int port);
  std::string Address() const { return o_.address.empty() ? "127.0.0.1" : o_.address; }
  // Local rank `local`'s fixed ring address, "" when the agent has none;
  // for a pipeline's ("world|stage"), its world ring's and, 8 ports above,
  // its stage ring's.
  std::string RingSlot(int local, bool pipeline) const;

 private:
  // "host:port" of the ring slots (RegisterRequest.ring_addr): local rank i
  // of an elastic job listens at port + i. Chosen at the first registration.
  std::string ring_addr_;
  std::vector<int> ring_fds_;  // the slots' ports, reserved (agent.cc); closed with the process

  // --- the controller connection ---------------------------------------
  // The channel to the controller this agent talks to now, and its address
  // in `*addr` when given: the one a follower named, or the first listed
  // (cluster/controllers.h).
  std::shared_ptr<grpc::Channel> Channel(std::string* addr = nullptr) EXCLUDES(channel_mu_);
  // A call to `addr` ended in `st`: when that controller did not serve
  // (unreachable, or a follower refusing), the next calls go where its
  // refusal pointed, else to the next controller listed. A no-op when
  // another thread moved on from `addr` already.
  void MaybeMoveOn(const std::string& addr, const grpc::Status& st, const grpc::ClientContext& ctx)
      EXCLUDES(channel_mu_);

  void Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds deadline);

  bool Register();

  // Reads commands into the queue the main thread drains. Reopens the stream
  // whenever it ends: deadline, controller restart, network trouble.
  void CommandLoop();

  void Report();

  void Emit(wire::AgentEvent e);
  void MaybeFence();
  void Unfence(const wire::Command& c);

  // --- commands ------------------------------------------------------------
  void ApplyCommands();

  // Emulated faults. Each only causes the fault; what follows (detection,
  // event, decision, recovery) is the ordinary code path.
  void Inject(const std::string& fault, int rank, const std::string& where, double factor);

  // Captures every rank's stacks on a thread of its own (eu-stack takes
  // tens of milliseconds a process; the main loop keeps its 100 ms beat)
  // and sends them up.
  void Trace(const std::string& id);

  // Stop-time diagnostics (diagnostics.h) on a thread of their own: the
  // alignment run takes seconds; the main loop keeps its beat and sends the
  // answer as an event when it is in.
  void Diagnose(const wire::Command& c);

  // --- staged releases (agent_staging.cc) ------------------------------------
  // A STAGE_RELEASE: processes of the release, set up beside the running
  // ranks, so that the restart that applies it is a handoff (handoff.h).
  void Stage(const wire::Command& c);
  // Reports RELEASE_STAGED once the staged processes wait (or cannot).
  void MaybeReportStaged();
  void ReportStaged(bool staged, const std::string& detail);
  void EmitDiagnostics();

  // The job's progress pattern, when its environment carries one (the job
  // file's `progress: {regex}`); `bulwark submit` refused a bad one, so an
  // error here is a hand-made environment, logged and ignored.
  std::shared_ptr<const ProgressPattern> ProgressFrom(const wire::Command& c);

  // --- handing ranks to running processes (handoff.h) ----------------------
  // Reads the rank links until every live rank of `spec`'s job waits for an
  // ASSIGN, or kRejoinWait passed.
  void AwaitWaitingRanks(const RankGroupSpec& spec);
  // A grow whose running ranks here all said SPLICE and each hold a ring
  // plan in `spec`: they get the generation while they train (StartRanks).
  bool CanSplice(const RankGroupSpec& spec) const;
  // Starts `spec`'s ranks and sends the reused processes their ASSIGN.
  void StartRanks(const RankGroupSpec& spec, const std::string& reason);
  // Keeps a spare per local rank of the running job once it trains.
  void MaybePrespawn();
  // The ranks of a START_RANKS (or a warm standby's STOP_RANKS) as this
  // machine runs them.
  RankGroupSpec SpecFrom(const wire::Command& c);
  // A STOP_RANKS: idle, or warm for the job it names (spares of it).
  void StandBy(const wire::Command& c);
  // A warm standby says once whether it holds spares of the job
  // (STANDBY_READY): an elastic job grows onto it only then (reconcile.h).
  void MaybeReportWarm();
  void ReportWarm(bool warm, const std::string& detail);

  std::string ShardSocketPath() const { return layout_.machine(o_.machine) + "/shards.sock"; }

  // --- observation -------------------------------------------------------
  // Lines that matched the progress pattern become step signals, exactly
  // what a rank speaking the rank link would send: the hang detector and
  // the ledger cannot tell the difference. The step time is the gap between
  // matched lines (the first one's includes the rank's start-up, which the
  // hang detector's warm-up steps do not learn from). Compute and
  // collective times are unknown: 0, so the fail-slow detector, which
  // compares compute time, never flags such a job.
  void SignalProgress(int rank, const std::vector<LogFollower::Progress>& lines);

  void ReadRankLinks();

  // Hands what the ranks said to the signal sum. With `progress`, rank 0's
  // steps are also the job's progress: a job that speaks only the link (the
  // Python client) prints no JSON step lines.
  void ForwardRankLinks(bool progress);

  // A rank that said LOST: the report its peer-lost exit used to be, held.
  void HoldPeerLost(int rank);

  // The generation this machine followed is over: what its ranks said last
  // goes to the signals (not to the job's progress), and gen_ starts empty.
  void EndGeneration();
  void WatchRanks();

  // Rank 0 completed `step`: a STEP event for the job's progress and the
  // ledger. Two sources feed it (JSON step lines in the log, or lines the
  // progress pattern matches; and the rank link), which may lag each other,
  // so only a step beyond the last reported one is news: a step going back
  // would read as recomputation in the ledger. reported_step_ restarts at 0
  // with every generation.
  void ReportStep(int64_t step, int64_t observed_ms = 0);

  // Reports the peer-lost exits whose grace ran out with no restart.
  void ReleaseEchoes();

  void InspectMachine();

  // A stuck rank is a failed process inspection (StuckRanks: a rank that
  // runs now and then, as on a slowed machine, is not stuck).
  void InspectRankProcesses();

  // Copies the loop's state for the metrics thread (agent_metrics.h).
  void PublishMetrics();
  // Hands the live ranks' pids to exit_watcher_ (exit_watcher.h).
  void WatchExits();

  AgentOptions o_;
  // Every timing rule of the agent reads this clock (agent/clock.h); only
  // gRPC deadlines and waits on real processes read the real one.
  std::shared_ptr<const AgentClock> clock_;
  Clock::time_point Now() const { return clock_->Now(); }
  cluster::Layout layout_;
  std::string token_;
  SignatureTable sigs_;
  Supervisor supervisor_;
  const int64_t incarnation_;
  InspectorPaths health_paths_;
  std::unique_ptr<GpuHealth> gpu_;  // null without NVML: the emulated device alone
  std::unique_ptr<ShardStore> shards_;
  std::unique_ptr<RankLinkServer> links_;
  SignalSum signals_;
  // Stack captures and diagnostics in flight, reaped by the main loop.
  Workers workers_;
  // Stop-time diagnostics: the job's command (the alignment reference),
  // commands already run, answers in.
  std::vector<std::string> job_argv_;
  std::set<std::string> diagnosed_;
  Mutex diagnostics_mu_;
  std::vector<wire::AgentEvent> diagnostics_done_ GUARDED_BY(diagnostics_mu_);
  StuckRanks stuck_{kProcessStuck};

  // The controller link is the one state three threads share: the main
  // loop, the command stream's reader and the workers (Trace uploads).
  Mutex channel_mu_;
  std::shared_ptr<grpc::Channel> channel_ GUARDED_BY(channel_mu_);
  std::string channel_addr_ GUARDED_BY(channel_mu_);
  // Where a follower's refusal or a dead address sent this agent; "": the
  // first controller listed.
  std::string target_ GUARDED_BY(channel_mu_);
  Mutex stream_mu_;
  grpc::ClientContext* stream_ctx_ GUARDED_BY(stream_mu_) = nullptr;
  Mutex queue_mu_;
  CondVar queue_cv_;  // a command arrived: the main loop wakes
  std::deque<wire::Command> queue_ GUARDED_BY(queue_mu_);
  bool rank_ended_ GUARDED_BY(queue_mu_) = false;  // a rank's process ended: the main loop wakes
  // Declared after what its wake touches, so that it stops first.
  ExitWatcher exit_watcher_{[this] {
    MutexLock lock(&queue_mu_);
    rank_ended_ = true;
    queue_cv_.NotifyOne();
  }};

  // Main thread only.
  bool registered_ = false;
  std::string registered_at_;  // the controller that took the registration
  // The controller refused this agent for good (an address its peers cannot
  // reach): the agent stops, and Run returns why.
  Status refused_;
  int64_t seq_ = 0;
  std::deque<wire::AgentEvent> pending_;
  EchoHold<wire::AgentEvent, Clock> echoes_{PeerLostGrace(o_.fence_timeout)};
  Clock::time_point last_report_ok_ = Now();
  Clock::time_point last_ok_sent_ = Now();  // the lease's start (FenceDue)
  // Set while fenced: the generation whose ranks it stopped. Its copies are
  // withheld until a restart takes the machine back in the next generation
  // (then trusted again) or the job went on without it (then forgotten).
  std::optional<int64_t> fenced_generation_;
  std::string applied_;
  std::map<int, Clock::time_point> last_progress_;  // by rank: the last matched progress line, or the start
  // What the agent follows of one generation of this machine's ranks,
  // one value so that ending a generation (a restart, a stop, a fence,
  // diagnostics) forgets all of it in one place: EndGeneration.
  struct GenerationView {
    std::map<int, LogFollower> followers;  // by rank: its log, from where the generation began
    int64_t reported_step = 0;             // the newest STEP sent up (ReportStep)
    // Its ranks that exited 0 here, each with the last step it was seen to
    // complete: sent with every report (bulwark.proto: FinishedRank).
    // Whatever a rank printed, exit 0 is its end; the controller completes
    // the job once every rank of it has ended so.
    std::map<int, int64_t> finished;
    std::map<int, int64_t> link_steps;  // by rank: the newest step it sent over its rank link
    bool saw_step = false;              // a rank reported a step
    bool in_place = false;              // a rank said INPLACE
    std::set<int> spliceable;           // ranks that said SPLICE (rank_link.h)
    // Peers whose end of a rank's connection closed (signatures.h:
    // ClosedPeer), sent with every report (bulwark.proto: peers_closed).
    std::set<std::string> peers_closed;
    size_t spares_started = 0;
  };
  GenerationView gen_;
  std::optional<RankGroupSpec> spare_spec_;  // the running job's, for spares
  bool yielding_ = false;                    // asked an elastic job's ranks to yield (AwaitWaitingRanks)
  bool splicing_ = false;                    // StartRanks sends the running ranks SPLICE, not ASSIGN
  bool warm_unanswered_ = false;             // a warm standby that has not said STANDBY_READY
  struct Staging {
    std::string id;  // the command's: a resent one is not staged twice
    int release = 0;
    RankGroupSpec spec;
    std::string identity;
    size_t want = 1;
    size_t started = 0;
    Clock::time_point since;
    bool reported = false;
  };
  std::optional<Staging> staging_;
  bool device_reported_ = false, disk_reported_ = false, memory_reported_ = false;
  bool nic_was_up_ = true;
  std::optional<LinkReading> last_link_;  // the kernel's, at the last inspection (--nic)
  std::string device_slowdown_;  // the NVML slowdown hint last logged

  // For /metrics: gathered by the main thread, published as a snapshot.
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::map<int, pid_t> seen_pids_;  // each rank's newest process seen
  std::map<int, int64_t> rank_restarts_;
  std::map<std::pair<int, std::string>, int64_t> rank_exits_;
  std::map<std::string, int64_t> inspection_failures_;
  std::optional<HealthReading> health_;
  Mutex metrics_mu_;
  AgentSnapshot snapshot_ GUARDED_BY(metrics_mu_);
  std::unique_ptr<MetricsServer> metrics_;
};

}  // namespace detail
}  // namespace bulwark::agent
