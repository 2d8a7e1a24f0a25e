#include "agent/agent.h"

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
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "agent/diagnostics.h"
#include "agent/echo_hold.h"
#include "agent/inspector.h"
#include "agent/monitor.h"
#include "agent/rank_link_server.h"
#include "agent/slow_injector.h"
#include "agent/tracer.h"
#include "agent/shard_store.h"
#include "agent/signatures.h"
#include "agent/supervisor.h"
#include "bulwark.grpc.pb.h"
#include "client/shard_socket.h"
#include "cluster/layout.h"
#include "cluster/tls.h"
#include "common/exit_codes.h"
#include "common/files.h"
#include "common/progress_pattern.h"
#include "common/token.h"

namespace bulwark::agent {
namespace {

using Clock = std::chrono::system_clock;
constexpr auto kLoopPeriod = std::chrono::milliseconds(100);
// A rank that exits with kExitPeerLost says a *peer* failed. Its report waits
// this long for the culprit's own report to reach the controller and the
// restart to come back; if the restart comes first the exit is the fault's
// echo and is dropped, so the incident names the culprit, not a survivor.
// It outlasts the controller's heartbeat timeout (2 s) plus a report period
// and its tick, so that a dead peer machine is found by its silence before a
// survivor is blamed.
constexpr auto kPeerLostGrace = std::chrono::milliseconds(4000);
constexpr auto kReportPeriod = std::chrono::milliseconds(500);
constexpr auto kInspectPeriod = std::chrono::milliseconds(1000);
constexpr auto kCallDeadline = std::chrono::milliseconds(1500);
constexpr auto kStreamDeadline = std::chrono::seconds(30);
constexpr auto kNicFlapDown = std::chrono::milliseconds(2000);
// A rank stopped (T) or in uninterruptible sleep (D) this long is reported
// as a failed process inspection (PolicyConfig::process_stuck's default).
constexpr auto kProcessStuck = std::chrono::seconds(10);


std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

int64_t Ms(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

void Log(const std::string& line) {
  std::fprintf(stderr, "agent: %s\n", line.c_str());
  std::fflush(stderr);
}

class Agent {
 public:
  Agent(AgentOptions o, std::string token, SignatureTable sigs, std::unique_ptr<ShardStore> shards,
        std::unique_ptr<RankLinkServer> links)
      : o_(std::move(o)), layout_{o_.dir}, token_(std::move(token)), sigs_(std::move(sigs)),
        supervisor_(layout_.ranks(o_.machine)), incarnation_(Ms(Clock::now())), shards_(std::move(shards)),
        links_(std::move(links)) {
    health_paths_ = {layout_.device(o_.machine), layout_.nic(o_.machine), layout_.machine(o_.machine)};
  }

  Status Run() {
    std::thread commands([this] { CommandLoop(); });
    auto next_report = Clock::now();
    auto next_inspect = Clock::now();
    while (!g_stop) {
      ApplyCommands();
      EmitDiagnostics();
      WatchRanks();
      ReleaseEchoes();
      ReadRankLinks();
      if (Clock::now() >= next_inspect) {
        InspectMachine();
        next_inspect = Clock::now() + kInspectPeriod;
      }
      // Report at once when there is news; otherwise the heartbeat period.
      if (Clock::now() >= next_report || !pending_.empty() || signals_.urgent()) {
        Report();
        next_report = Clock::now() + kReportPeriod;
      }
      std::this_thread::sleep_for(kLoopPeriod);
    }
    slow_.Stop();
    supervisor_.StopAll();
    for (std::thread& t : tracers_) t.join();
    {
      // Ends a stream blocked in Read now rather than at its deadline.
      std::lock_guard<std::mutex> lock(stream_mu_);
      if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
    }
    commands.join();
    return Status::OK();
  }

 private:
  // --- the controller connection ---------------------------------------
  std::shared_ptr<grpc::Channel> Channel() {
    std::lock_guard<std::mutex> lock(channel_mu_);
    Result<std::string> addr = ReadFile(layout_.controller_addr());
    std::string a = addr.ok() ? *addr : "";
    while (!a.empty() && (a.back() == '\n' || a.back() == ' ')) a.pop_back();
    if (!channel_ || a != channel_addr_) {
      // gRPC's default reconnect backoff grows to minutes; a restarted
      // controller must hear from its agents within its reconnect grace.
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
      args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
      Result<std::shared_ptr<grpc::ChannelCredentials>> creds = cluster::ChannelCredentials(layout_);
      if (!creds.ok()) Log("cannot use the cluster's TLS credentials: " + creds.status().ToString());
      channel_ = grpc::CreateCustomChannel(a, creds.ok() ? *creds : grpc::InsecureChannelCredentials(), args);
      channel_addr_ = a;
    }
    return channel_;
  }

  void Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds deadline) {
    ctx->AddMetadata(kTokenMetadataKey, token_);
    ctx->set_deadline(Clock::now() + deadline);
  }

  bool Register() {
    auto rpc = wire::AgentService::NewStub(Channel());
    grpc::ClientContext ctx;
    Prepare(&ctx, kCallDeadline);
    wire::RegisterRequest req;
    req.set_machine(o_.machine);
    req.set_machine_dir(layout_.machine(o_.machine));
    req.set_incarnation(incarnation_);
    req.set_shard_addr(shards_->addr());
    wire::RegisterReply reply;
    grpc::Status st = rpc->Register(&ctx, req, &reply);
    if (!st.ok()) {
      if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED) Log("controller refused registration: " + st.error_message());
      return false;
    }
    Log("registered " + o_.machine + " with the controller");
    return true;
  }

  // Reads commands into the queue the main thread drains. Reopens the stream
  // whenever it ends: deadline, controller restart, network trouble.
  void CommandLoop() {
    while (!g_stop) {
      auto rpc = wire::AgentService::NewStub(Channel());
      grpc::ClientContext ctx;
      Prepare(&ctx, std::chrono::duration_cast<std::chrono::milliseconds>(kStreamDeadline));
      {
        std::lock_guard<std::mutex> lock(stream_mu_);
        stream_ctx_ = &ctx;
      }
      wire::CommandStreamRequest req;
      req.set_machine(o_.machine);
      req.set_incarnation(incarnation_);
      auto reader = rpc->Commands(&ctx, req);
      wire::Command c;
      while (!g_stop && reader->Read(&c)) {
        std::lock_guard<std::mutex> lock(queue_mu_);
        queue_.push_back(c);
      }
      reader->Finish();
      {
        std::lock_guard<std::mutex> lock(stream_mu_);
        stream_ctx_ = nullptr;
      }
      if (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  }

  void Report() {
    if (!registered_) {
      registered_ = Register();
      if (!registered_) return;
    }
    auto rpc = wire::AgentService::NewStub(Channel());
    grpc::ClientContext ctx;
    Prepare(&ctx, kCallDeadline);
    wire::ReportRequest req;
    req.set_machine(o_.machine);
    req.set_incarnation(incarnation_);
    req.set_generation(supervisor_.generation());
    for (int r : supervisor_.LiveRanks()) req.add_live_ranks(r);
    for (const ShardHolding& h : shards_->Holdings()) {
      wire::ShardCopy* c = req.add_shards();
      c->set_rank(h.rank);
      c->set_step(h.step);
      c->set_backup(h.backup);
    }
    for (const wire::AgentEvent& e : pending_) *req.add_events() = e;
    // The ranks' step signals are observations: lost with a failed report,
    // and the next one carries newer ones.
    for (wire::RankSignal& s : signals_.Take()) *req.add_signals() = std::move(s);
    wire::ReportReply reply;
    grpc::Status st = rpc->Report(&ctx, req, &reply);
    if (st.ok()) {
      last_report_ok_ = Clock::now();
      while (!pending_.empty() && pending_.front().seq() <= reply.acked_seq()) pending_.pop_front();
      return;
    }
    // The controller forgot us (restarted without our registration): register again.
    if (st.error_code() == grpc::StatusCode::FAILED_PRECONDITION) registered_ = false;
    // Otherwise the events stay queued and go with the next report.
  }

  void Emit(wire::AgentEvent e) {
    e.set_seq(++seq_);
    if (e.observed_ms() == 0) e.set_observed_ms(Ms(Clock::now()));
    e.set_generation(supervisor_.generation());
    pending_.push_back(std::move(e));
  }

  // --- commands ------------------------------------------------------------
  void ApplyCommands() {
    std::deque<wire::Command> batch;
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      batch.swap(queue_);
    }
    if (!batch.empty()) WatchRanks();  // exits that happened before the command are observations
    for (const wire::Command& c : batch) {
      if (c.kind() == wire::Command::START_RANKS || c.kind() == wire::Command::STOP_RANKS) {
        if (c.id() != applied_ && !echoes_.empty()) {
          Log("dropping " + std::to_string(echoes_.DropAll()) + " peer-lost exit(s): the restart answers them");
        }
      }
      switch (c.kind()) {
        case wire::Command::START_RANKS: {
          if (c.id() == applied_) break;  // already carrying it out
          applied_ = c.id();
          RankGroupSpec spec;
          spec.generation = c.generation();
          for (const auto& r : c.ranks()) spec.ranks.emplace_back(r.rank(), r.local_rank());
          spec.world_size = c.world_size();
          spec.local_world_size = c.local_world_size();
          spec.master_addr = c.master_addr();
          spec.master_port = c.master_port();
          spec.argv.assign(c.argv().begin(), c.argv().end());
          spec.env.insert(c.env().begin(), c.env().end());
          spec.env[client::kShardSocketEnv] = ShardSocketPath();
          spec.env[client::kRankSocketEnv] = links_->path();
          if (c.spike_factor() > 0) spec.env[client::kSpikeFactorEnv] = std::to_string(c.spike_factor());
          // The job's command is the alignment test's reference model; an
          // injected SDC stays with the machine, through every restart.
          job_argv_ = spec.argv;
          if (!sdc_.empty()) spec.env["BULWARK_SDC"] = sdc_;
          // Local rank i holds the backup of backup_of[i] (a replicated-state
          // job writes it from its own memory: client/shard_client.h).
          for (size_t i = 0; i < spec.ranks.size(); ++i) {
            const int local = spec.ranks[i].second;
            if (local >= 0 && local < c.backup_of_size()) {
              spec.rank_env[spec.ranks[i].first][client::kShardBackupOfEnv] = std::to_string(c.backup_of(local));
            }
          }
          ShardRoutes routes;
          routes.backup_machine = c.backup_machine();
          routes.backup_addr = c.backup_addr();
          for (const auto& src : c.restore_from()) routes.restore_from.push_back({src.rank(), src.machine(), src.addr()});
          routes.durable_dir = c.durable_dir();
          routes.persist_every = c.persist_every();
          std::vector<int> ranks;
          for (const auto& r : spec.ranks) ranks.push_back(r.first);
          // Fetching copies from peers overlaps the ranks' start-up.
          shards_->SetRoutes(routes, ranks);
          // The old ranks' last reports, read before they were stopped, are
          // the old generation's, not this one's progress (a step 500 would
          // hide steps 41.. from the ledger). Stopped first, so that what
          // they print while stopping is behind the new followers.
          supervisor_.StopAll();
          ForwardRankLinks(/*progress=*/false);
          followers_.clear();
          std::shared_ptr<const ProgressPattern> progress = ProgressFrom(c);
          // Followers start at each log's current end, before the rank writes.
          for (const auto& r : spec.ranks) {
            followers_.emplace(r.first, LogFollower(supervisor_.LogPath(r.first), progress));
            last_progress_[r.first] = Clock::now();
          }
          Status st = supervisor_.Start(spec);
          Log("generation " + std::to_string(spec.generation) + ": started " + std::to_string(spec.ranks.size()) +
              " ranks (" + c.reason() + ")" + (st.ok() ? "" : ": " + st.ToString()));
          reported_step_ = 0;
          break;
        }
        case wire::Command::STOP_RANKS:
          if (c.id() == applied_) break;
          applied_ = c.id();
          supervisor_.StopAll();
          ForwardRankLinks(/*progress=*/false);
          followers_.clear();
          Log("stopped ranks (" + c.reason() + ")");
          break;
        case wire::Command::INJECT:
          Inject(c.inject(), c.inject_rank(), c.inject_where(), c.inject_factor());
          break;
        case wire::Command::TRACE:
          Trace(c.id());
          break;
        case wire::Command::DIAGNOSE:
          Diagnose(c);
          break;
        case wire::Command::RESET_HEALTH:
          slow_.Stop();
          sdc_.clear();
          ResetEmulatedHealth(health_paths_);
          device_reported_ = disk_reported_ = memory_reported_ = false;
          Log("emulated device and NIC reset to healthy");
          break;
        default:
          break;
      }
    }
  }

  // Emulated faults. Each only causes the fault; what follows (detection,
  // event, decision, recovery) is the ordinary code path.
  void Inject(const std::string& fault, int rank, const std::string& where, double factor) {
    if (rank < 0) rank = supervisor_.FirstRank();
    Log("injecting " + fault + (rank >= 0 ? " (rank " + std::to_string(rank) + ")" : ""));
    const bool needs_rank = fault == "crash" || fault == "kill" || fault == "corrupt-shard" || fault == "hang" ||
                            fault == "nan" || fault == "loss-spike";
    if (needs_rank && rank < 0) {
      Log("nothing to " + fault + ": no rank runs on this machine");
      return;
    }
    if (fault == "crash") {
      // What an uncaught C++ exception in a rank looks like: the runtime
      // prints the exception and calls abort().
      FILE* f = std::fopen(supervisor_.LogPath(rank).c_str(), "a");
      if (f != nullptr) {
        std::fputs("terminate called after throwing an instance of 'c10::Error'\n"
                   "  what():  Expected all tensors to be on the same device, but found at least two "
                   "devices, cpu and meta! (injected by bulwark)\n", f);
        std::fclose(f);
      }
      if (Status st = supervisor_.Signal(rank, SIGABRT); !st.ok()) Log(st.ToString());
    } else if (fault == "corrupt-shard") {
      // Bit rot in the newest in-memory shard, then the rank dies: the
      // restore must notice the damage and take another copy.
      std::optional<int64_t> step = shards_->Corrupt(rank);
      Log(step ? "flipped a bit in rank " + std::to_string(rank) + "'s shard of step " + std::to_string(*step)
               : "rank " + std::to_string(rank) + " has no shard in memory to corrupt");
      if (Status st = supervisor_.Signal(rank, SIGKILL); !st.ok()) Log(st.ToString());
    } else if (fault == "kill") {
      if (Status st = supervisor_.Signal(rank, SIGKILL); !st.ok()) Log(st.ToString());
    } else if (fault == "machine-down") {
      // The agent and, through PDEATHSIG, its ranks die at once.
      ::kill(::getpid(), SIGKILL);
    } else if (fault == "device-fail") {
      WriteFileAtomic(health_paths_.device,
                      std::string("Xid 48: uncorrectable ECC error (double-bit) on device 0\n"));
    } else if (fault == "nic-flap") {
      WriteFileAtomic(health_paths_.nic, std::string("down\n"));
      nic_up_at_ = Clock::now() + kNicFlapDown;
    } else if (fault == "slow") {
      // The machine itself is slow from now on, whatever runs on it, until
      // an operator repairs it (RESET_HEALTH).
      slow_.Start(factor);
    } else if (fault == "sdc") {
      // The machine corrupts matmuls from now on (trainer/sdc.h): its
      // running ranks at once, its later ranks and its alignment runs
      // through BULWARK_SDC. `where` is the mode, `factor` the rate.
      sdc_ = (where.empty() ? std::string("nan") : where) + ":" + std::to_string(factor > 0 ? factor : 1.0);
      for (const auto& [r, pid] : supervisor_.Pids()) {
        if (Status st = links_->Send(pid, "INJECT sdc-" + sdc_); !st.ok()) Log("cannot inject sdc: " + st.ToString());
      }
    } else if (fault == "hang" || fault == "nan" || fault == "loss-spike") {
      // The trainer's test hook (client/rank_link.h) does it inside the rank,
      // so its stacks and values are the real thing.
      auto pid = supervisor_.Pids().find(rank);
      if (pid == supervisor_.Pids().end()) {
        Log("rank " + std::to_string(rank) + " does not run here");
        return;
      }
      const std::string what = fault == "hang" ? "hang-" + (where.empty() ? std::string("collective") : where) : fault;
      if (Status st = links_->Send(pid->second, "INJECT " + what); !st.ok()) Log("cannot inject " + what + ": " + st.ToString());
    }
  }

  // Captures every rank's stacks on a thread of its own (eu-stack takes
  // tens of milliseconds a process; the main loop keeps its 100 ms beat)
  // and sends them up.
  void Trace(const std::string& id) {
    std::map<int, pid_t> pids = supervisor_.Pids();
    Log("capturing the stacks of " + std::to_string(pids.size()) + " rank(s) for " + id);
    const auto started = Clock::now();
    tracers_.emplace_back([this, id, pids, started] {
      wire::StacksRequest req;
      req.set_machine(o_.machine);
      req.set_incarnation(incarnation_);
      req.set_trace(id);
      for (const auto& [rank, pid] : pids) {
        wire::RankStack* s = req.add_stacks();
        s->set_rank(rank);
        s->set_pid(pid);
        Result<CapturedStack> st = CaptureStacks(pid, std::chrono::milliseconds(2000));
        if (st.ok()) {
          s->set_text(st->text);
          s->set_capture_ms(st->ms);
        } else {
          s->set_error(st.status().message());
        }
      }
      auto rpc = wire::AgentService::NewStub(Channel());
      grpc::ClientContext ctx;
      Prepare(&ctx, kCallDeadline);
      wire::StacksReply reply;
      grpc::Status st = rpc->UploadStacks(&ctx, req, &reply);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
      Log((st.ok() ? "sent the stacks for " : "sending the stacks for ") + id + (st.ok() ? "" : " failed: " + st.error_message()) +
          " (" + std::to_string(static_cast<int>(ms)) + " ms after the request)");
    });
  }

  // Stop-time diagnostics (diagnostics.h) on a thread of their own: the
  // alignment run takes seconds; the main loop keeps its beat and sends the
  // answer as an event when it is in.
  void Diagnose(const wire::Command& c) {
    if (!diagnosed_.insert(c.id()).second) return;  // a resent command
    // The tests need the machine to themselves; the controller's STOP_RANKS
    // for the same decision may arrive after this one-shot.
    supervisor_.StopAll();
    ForwardRankLinks(/*progress=*/false);
    followers_.clear();
    DiagnosticsRequest req;
    req.tests.assign(c.tests().begin(), c.tests().end());
    req.budget = std::chrono::milliseconds(c.budget_ms() > 0 ? c.budget_ms() : 60000);
    req.trainer_argv = job_argv_;
    req.sdc = sdc_;
    req.health = health_paths_;
    for (const wire::ReplayAssignment& x : c.replay()) {
      req.replay.push_back({x.group(), x.rank(), x.world(), x.master_addr(), x.master_port()});
    }
    const int64_t incident = c.incident();
    Log("running diagnostics for incident " + std::to_string(incident) + " (" + std::to_string(req.tests.size()) +
        " test(s), budget " + std::to_string(req.budget.count()) + " ms)");
    tracers_.emplace_back([this, req, incident] {
      DiagnosticsOutcome out = RunDiagnostics(req);
      wire::AgentEvent e;
      e.set_kind(wire::AgentEvent::DIAGNOSTICS);
      e.set_incident(incident);
      e.set_alignment_hash(out.alignment_hash);
      std::string line;
      for (const TestOutcome& t : out.results) {
        wire::TestResult* r = e.add_results();
        r->set_test(t.test);
        r->set_passed(t.passed);
        r->set_detail(t.detail);
        r->set_ms(t.ms);
        line += " " + t.test + (t.passed ? " ok " : " FAILED ") + std::to_string(static_cast<int>(t.ms)) + " ms";
      }
      Log("diagnostics for incident " + std::to_string(incident) + ":" + line);
      std::lock_guard<std::mutex> lock(diagnostics_mu_);
      diagnostics_done_.push_back(std::move(e));
    });
  }
  void EmitDiagnostics() {
    std::vector<wire::AgentEvent> done;
    {
      std::lock_guard<std::mutex> lock(diagnostics_mu_);
      done.swap(diagnostics_done_);
    }
    for (wire::AgentEvent& e : done) Emit(std::move(e));
  }

  // The job's progress pattern, when its environment carries one (the job
  // file's `progress: {regex}`); `bulwark submit` refused a bad one, so an
  // error here is a hand-made environment, logged and ignored.
  std::shared_ptr<const ProgressPattern> ProgressFrom(const wire::Command& c) {
    auto it = c.env().find(kProgressRegexEnv);
    if (it == c.env().end() || it->second.empty()) return nullptr;
    Result<ProgressPattern> p = ProgressPattern::Compile(it->second);
    if (!p.ok()) {
      Log("no progress from the ranks' output: " + p.status().message());
      return nullptr;
    }
    return std::make_shared<const ProgressPattern>(std::move(*p));
  }

  // Lines that matched the progress pattern become step signals, exactly
  // what a rank speaking the rank link would send: the hang detector and
  // the ledger cannot tell the difference. The step time is the gap between
  // matched lines (the first one's includes the rank's start-up, which the
  // hang detector's warm-up steps do not learn from). Compute and
  // collective times are unknown: 0, so the fail-slow detector, which
  // compares compute time, never flags such a job.
  void SignalProgress(int rank, const std::vector<LogFollower::Progress>& lines) {
    for (const LogFollower::Progress& p : lines) {
      client::StepSignal s;
      s.step = p.match.step;
      s.loss = p.match.loss.value_or(0);
      s.step_ms = std::chrono::duration<double, std::milli>(p.seen - last_progress_[rank]).count();
      s.observed_ms = Ms(p.seen);
      last_progress_[rank] = p.seen;
      signals_.Add(rank, supervisor_.generation(), s.Format());
    }
  }

  void ReadRankLinks() {
    ForwardRankLinks(/*progress=*/true);
    std::set<pid_t> pids;
    for (const auto& [rank, pid] : supervisor_.Pids()) pids.insert(pid);
    slow_.SetPids(std::move(pids));
  }

  // Hands what the ranks said to the signal sum. With `progress`, rank 0's
  // steps are also the job's progress: a job that speaks only the link (the
  // Python client) prints no JSON step lines.
  void ForwardRankLinks(bool progress) {
    for (RankLinkServer::Message& m : links_->Take()) {
      if (progress && m.rank == 0 && m.text.compare(0, 5, "STEP ") == 0) {
        Result<client::StepSignal> step = client::StepSignal::Parse(m.text);
        if (step.ok() && step->halted.empty()) ReportStep(step->step);  // a held-back step did not complete
      }
      signals_.Add(m.rank, supervisor_.generation(), m.text);
    }
  }

  std::string ShardSocketPath() const { return layout_.machine(o_.machine) + "/shards.sock"; }

  // --- observation -------------------------------------------------------
  void WatchRanks() {
    for (auto& [rank, f] : followers_) {
      f.Poll();
      SignalProgress(rank, f.TakeProgress());
    }
    auto r0 = followers_.find(0);
    if (r0 != followers_.end() && r0->second.last_step()) ReportStep(*r0->second.last_step());
    for (auto& [rank, f] : followers_) {
      if (auto r = f.TakeRestore()) {
        wire::AgentEvent e;
        e.set_kind(wire::AgentEvent::RESTORED);
        e.set_rank(rank);
        e.set_step(r->step);
        e.set_source(r->source);
        e.set_newest_step(r->newest_step);
        e.set_restore_ms(r->ms);
        Log("ranks restored step " + std::to_string(r->step) + " from " + r->source + " (newest surviving step " +
            std::to_string(r->newest_step) + ", " + std::to_string(static_cast<int>(r->ms)) + " ms)");
        Emit(e);
      }
    }
    for (const RankExit& x : supervisor_.Reap()) {
      auto it = followers_.find(x.rank);
      std::vector<std::string> tail;
      if (it != followers_.end()) {
        it->second.Poll();
        tail = it->second.tail();
      }
      if (x.signal == 0 && x.exit_code == 0) {
        if (x.rank == 0 && it != followers_.end() && it->second.done_step()) {
          wire::AgentEvent e;
          e.set_kind(wire::AgentEvent::JOB_DONE);
          e.set_step(*it->second.done_step());
          Emit(e);
        }
        continue;
      }
      wire::AgentEvent e;
      e.set_kind(wire::AgentEvent::RANK_EXITED);
      e.set_rank(x.rank);
      e.set_exit_code(x.exit_code);
      e.set_signal(x.signal);
      e.set_signature(sigs_.Match(tail));
      // The shell's and exec's "command not found": the job's fault, not the machine's.
      if (x.signal == 0 && x.exit_code == 127 && e.signature().empty()) e.set_signature("command_not_found");
      e.set_observed_ms(Ms(x.at));
      if (x.signal == 0 && x.exit_code == kExitPeerLost) {
        Log("rank " + std::to_string(x.rank) + " lost a peer (" + e.signature() + "); holding the report for the culprit's");
        echoes_.Hold(e, x.at);
        continue;
      }
      Log("rank " + std::to_string(x.rank) + " exited (code " + std::to_string(x.exit_code) + ", signal " +
          std::to_string(x.signal) + ", signature '" + e.signature() + "')");
      Emit(e);
    }
  }

  // Rank 0 completed `step`: a STEP event for the job's progress and the
  // ledger. Two sources feed it (JSON step lines in the log, or lines the
  // progress pattern matches; and the rank link), which may lag each other,
  // so only a step beyond the last reported one is news: a step going back
  // would read as recomputation in the ledger. reported_step_ restarts at 0
  // with every generation.
  void ReportStep(int64_t step) {
    if (step <= reported_step_) return;
    reported_step_ = step;
    wire::AgentEvent e;
    e.set_kind(wire::AgentEvent::STEP);
    e.set_step(step);
    // One step event per loop: the latest is all the policy needs.
    if (!pending_.empty() && pending_.back().kind() == wire::AgentEvent::STEP) pending_.pop_back();
    Emit(e);
  }

  // Reports the peer-lost exits whose grace ran out with no restart.
  void ReleaseEchoes() {
    const auto now = Clock::now();
    // Reachable: a report went through within the last report period and a
    // failed call's deadline.
    const bool reachable = now - last_report_ok_ <= kReportPeriod + kCallDeadline;
    for (wire::AgentEvent& e : echoes_.Due(now, reachable)) {
      Log("reporting rank " + std::to_string(e.rank()) + "'s peer-lost exit: no restart came");
      Emit(std::move(e));
    }
  }

  void InspectMachine() {
    if (nic_up_at_ && Clock::now() >= *nic_up_at_) {
      WriteFileAtomic(health_paths_.nic, std::string("up\n"));
      nic_up_at_.reset();
    }
    const HealthReading h = Inspect(health_paths_);
    auto fail = [&](const char* kind, const std::string& detail) {
      wire::AgentEvent e;
      e.set_kind(wire::AgentEvent::INSPECTION_FAILED);
      e.set_inspection(kind);
      e.set_detail(detail);
      Log(std::string("inspection failed: ") + kind + ": " + detail);
      Emit(e);
    };
    // Each failure is reported when it appears, not every second after.
    if (!h.device_ok && !device_reported_) fail("device", h.device_detail);
    device_reported_ = !h.device_ok;
    if (!h.disk_ok && !disk_reported_) fail("disk", h.disk_detail);
    disk_reported_ = !h.disk_ok;
    if (!h.memory_ok && !memory_reported_) fail("memory", h.memory_detail);
    memory_reported_ = !h.memory_ok;
    if (!h.nic_up && nic_was_up_) {
      wire::AgentEvent e;
      e.set_kind(wire::AgentEvent::NETWORK_ALERT);
      e.set_detail("link down on " + o_.machine);
      Log("network alert: link down");
      Emit(e);
    }
    nic_was_up_ = h.nic_up;
    InspectRankProcesses();
  }

  // A stuck rank is a failed process inspection. The machine's own slow
  // emulation stops ranks on purpose: not judged while it runs.
  void InspectRankProcesses() {
    const std::map<int, pid_t> none;
    for (const auto& [rank, detail] : stuck_.Check(slow_.active() ? none : supervisor_.Pids(), std::chrono::steady_clock::now())) {
      wire::AgentEvent e;
      e.set_kind(wire::AgentEvent::INSPECTION_FAILED);
      e.set_inspection("process");
      e.set_rank(rank);
      e.set_detail(detail);
      Log("inspection failed: process: " + detail);
      Emit(e);
    }
  }

  AgentOptions o_;
  cluster::Layout layout_;
  std::string token_;
  SignatureTable sigs_;
  Supervisor supervisor_;
  const int64_t incarnation_;
  InspectorPaths health_paths_;
  std::unique_ptr<ShardStore> shards_;
  std::unique_ptr<RankLinkServer> links_;
  SignalSum signals_;
  SlowInjector slow_;
  std::vector<std::thread> tracers_;
  // Stop-time diagnostics: the job's command (the alignment reference), the
  // emulated SDC ("" none, "nan:1.000000"), commands already run, answers in.
  std::vector<std::string> job_argv_;
  std::string sdc_;
  std::set<std::string> diagnosed_;
  std::mutex diagnostics_mu_;
  std::vector<wire::AgentEvent> diagnostics_done_;
  StuckRanks stuck_{kProcessStuck};

  std::mutex channel_mu_;
  std::shared_ptr<grpc::Channel> channel_;
  std::string channel_addr_;
  std::mutex stream_mu_;
  grpc::ClientContext* stream_ctx_ = nullptr;
  std::mutex queue_mu_;
  std::deque<wire::Command> queue_;

  // Main thread only.
  bool registered_ = false;
  int64_t seq_ = 0;
  std::deque<wire::AgentEvent> pending_;
  EchoHold<wire::AgentEvent, Clock> echoes_{kPeerLostGrace};
  Clock::time_point last_report_ok_ = Clock::now();
  std::string applied_;
  std::map<int, LogFollower> followers_;
  std::map<int, Clock::time_point> last_progress_;  // by rank: the last matched progress line, or the start
  int64_t reported_step_ = 0;
  bool device_reported_ = false, disk_reported_ = false, memory_reported_ = false;
  bool nic_was_up_ = true;
  std::optional<Clock::time_point> nic_up_at_;
};

}  // namespace

Status RunAgent(const AgentOptions& options) {
  const cluster::Layout layout{options.dir};
  if (options.machine.empty()) return Status::InvalidArgument("agent: --machine is required");
  Result<std::string> token = ReadToken(layout.token());
  if (!token.ok()) return token.status();
  Result<SignatureTable> sigs = SignatureTable::Load(options.builtin_signatures);
  if (!sigs.ok()) return sigs.status();
  if (PathExists(layout.signatures())) {
    Result<SignatureTable> user = SignatureTable::Load(layout.signatures());
    if (!user.ok()) return user.status();
    sigs->Prepend(*user);
  }
  BULWARK_RETURN_IF_ERROR(MakeDirs(layout.health(options.machine)));
  BULWARK_RETURN_IF_ERROR(MakeDirs(layout.ranks(options.machine)));
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(layout.agent_pid(options.machine), std::to_string(::getpid()) + "\n"));
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  Log("machine " + options.machine + " up with " + std::to_string(sigs->size()) + " error signatures");
  auto shards = ShardStore::Start(options.machine, layout.machine(options.machine) + "/shards.sock", "127.0.0.1", *token,
                                 [](const std::string& line) { Log("shards: " + line); });
  if (!shards.ok()) return shards.status();
  auto links = RankLinkServer::Start(layout.machine(options.machine) + "/ranks.sock",
                                     [](const std::string& line) { Log(line); });
  if (!links.ok()) return links.status();
  Agent agent(options, *token, std::move(*sigs), std::move(*shards), std::move(*links));
  return agent.Run();
}

}  // namespace bulwark::agent
