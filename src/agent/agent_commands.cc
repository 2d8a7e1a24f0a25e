// The agent carrying out the controller's commands: starting and stopping
// rank groups, emulated fault injections, stack traces and the stop-time
// ladder's diagnostics, and forwarding the ranks' progress.
#include "agent/agent_impl.h"

#include "common/ring_layout.h"
#include "rank_client/shard_client.h"

namespace bulwark::agent::detail {

void Agent::ApplyCommands() {
  std::deque<wire::Command> batch;
  {
    MutexLock lock(&queue_mu_);
    batch.swap(queue_);
  }
  if (!batch.empty()) WatchRanks();  // exits that happened before the command are observations
  for (const wire::Command& c : batch) {
    if (c.kind() == wire::Command::START_RANKS || c.kind() == wire::Command::STOP_RANKS) {
      if (c.id() != applied_ && !echoes_.empty()) {
        Log("dropping " + std::to_string(echoes_.DropEchoes(Now())) + " peer-lost exit(s): the restart answers them");
      }
    }
    switch (c.kind()) {
      case wire::Command::START_RANKS: {
        if (c.id() == applied_) break;  // already carrying it out
        applied_ = c.id();
        Unfence(c);
        RankGroupSpec spec = SpecFrom(c);
        // The job's command is the alignment test's reference model.
        job_argv_ = spec.argv;
        stuck_.set_limit(c.process_stuck_ms() > 0 ? std::chrono::milliseconds(c.process_stuck_ms())
                                                  : std::chrono::duration_cast<std::chrono::milliseconds>(kProcessStuck));
        // Local rank i holds the backup of backup_of[i] (a replicated-state
        // job writes it from its own memory: client/shard_client.h).
        for (size_t i = 0; i < spec.ranks.size(); ++i) {
          const int local = spec.ranks[i].second;
          if (local >= 0 && local < c.backup_of_size()) {
            spec.rank_env[spec.ranks[i].first][rank_client::kShardBackupOfEnv] = std::to_string(c.backup_of(local));
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
        // Requeue mode: the machine counts as given back and acquired cold.
        if (c.fresh_machines()) {
          supervisor_.StopAll();
          supervisor_.StopSpares();  // a machine acquired cold holds no spare either
          staging_.reset();
          shards_->Forget();
          if (!c.rollback()) Log("fresh machine (requeue): forgot every in-memory copy");
        }
        // A drifting machine was found (controller/policy_align.cc): nothing
        // newer than restore_at_most may be restored, here or later. The
        // variable is the job's environment, so no process of this
        // generation is reused by a later one that has no cap.
        if (c.rollback()) {
          const int removed =
              c.durable_dir().empty() ? 0 : shards_->DiscardDurableAfter(c.durable_dir(), ranks, c.restore_at_most());
          spec.env[rank_client::kRestoreAtMostEnv] = std::to_string(c.restore_at_most());
          Log("rollback: the ranks restore step " + std::to_string(c.restore_at_most()) +
              " at most; forgot every in-memory copy, removed " + std::to_string(removed) +
              " durable copies above it");
        }
        // Fetching copies from peers overlaps the ranks' start-up.
        shards_->SetRoutes(routes, ranks);
        // A rank still inside the failed generation's collective learns of
        // the failure in moments (its peer's sockets closed); it may then
        // rejoin in place. One still silent after that is stopped.
        AwaitWaitingRanks(spec);
        // What they said while this restart was under way, it answers.
        echoes_.DropEchoes(Now());
        // The old ranks' last reports, read before they were stopped, are
        // the old generation's, not this one's progress (a step 500 would
        // hide steps 41.. from the ledger). Stopped first, so that what
        // they print while stopping is behind the new followers.
        EndGeneration();
        std::shared_ptr<const ProgressPattern> progress = ProgressFrom(c);
        // Followers start at each log's current end, before the rank writes.
        for (const auto& r : spec.ranks) {
          gen_.followers.emplace(r.first, LogFollower(supervisor_.LogPath(r.first), progress));
          last_progress_[r.first] = Now();
        }
        StartRanks(spec, c.reason());
        // Spares of another command or environment (a replay's accepted
        // step, an injected SDC, a release staged but not the one started)
        // would never be used.
        supervisor_.StopSpares({Supervisor::Identity(spec)});
        staging_.reset();
        spare_spec_ = spec;
        break;
      }
      case wire::Command::STOP_RANKS:
        if (c.id() == applied_) break;
        applied_ = c.id();
        Unfence(c);
        supervisor_.StopAll();
        EndGeneration();
        StandBy(c);
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
      case wire::Command::STAGE_RELEASE:
        Stage(c);
        break;
      case wire::Command::RESET_HEALTH:
        // The operator mended the machine (the controller repaired its
        // emulated parts first): what this agent reported is history, and
        // the device's error counters start from their values now.
        device_reported_ = disk_reported_ = memory_reported_ = false;
        if (gpu_) gpu_->Rebaseline();
        Log("machine returned: health checks start afresh");
        break;
      default:
        break;
    }
  }
}

std::string Agent::RingSlot(int local, bool pipeline) const {
  const std::string world = RingSlotAddress(ring_addr_, local, 0);
  if (!pipeline || world.empty()) return world;
  const std::string stage = RingSlotAddress(ring_addr_, local, 1);
  return stage.empty() ? "" : world + "|" + stage;
}

RankGroupSpec Agent::SpecFrom(const wire::Command& c) {
  RankGroupSpec spec;
  spec.generation = c.generation();
  for (const auto& r : c.ranks()) spec.ranks.emplace_back(r.rank(), r.local_rank());
  spec.world_size = c.world_size();
  spec.local_world_size = c.local_world_size();
  spec.elastic = c.elastic();
  spec.master_addr = c.master_addr();
  spec.master_port = c.master_port();
  spec.argv.assign(c.argv().begin(), c.argv().end());
  spec.env.insert(c.env().begin(), c.env().end());
  spec.env[rank_client::kShardSocketEnv] = ShardSocketPath();
  spec.env[rank_client::kRankSocketEnv] = links_->path();
  if (c.spike_factor() > 0) spec.env[rank_client::kSpikeFactorEnv] = std::to_string(c.spike_factor());
  if (!c.spike_rule().empty()) spec.env[rank_client::kSpikeRuleEnv] = c.spike_rule();
  // An elastic job's plans: each rank forms its ring from its own, at its
  // slot's fixed address, with no store (common/ring_layout.h).
  for (const auto& r : c.ranks()) {
    const std::string slot = RingSlot(r.local_rank(), r.ring_plan().find('|') != std::string::npos);
    if (r.ring_plan().empty() || slot.empty()) continue;
    spec.rank_env[r.rank()][rank_client::kRingPlanEnv] = r.ring_plan();
    spec.rank_env[r.rank()][rank_client::kRingAddrEnv] = slot;
  }
  // The machine's emulated matmul corruption, which the ranks read as they
  // compute (trainer/diag/sdc.h): a fault injected later reaches them too.
  spec.env["BULWARK_SDC_FILE"] = health_paths_.sdc;
  // And its pace: a throttled machine's ranks compute slower (trainer/diag/pace.h).
  spec.env["BULWARK_PACE_FILE"] = health_paths_.pace;
  return spec;
}

void Agent::StandBy(const wire::Command& c) {
  warm_unanswered_ = false;
  if (c.argv_size() == 0) {
    supervisor_.StopSpares();
    staging_.reset();
    spare_spec_.reset();
    return;
  }
  // A warm standby (plane/actuator.h: WarmStandby): spares of the job, at
  // once (nothing else runs here). No rank of it ran here to say INPLACE:
  // bulwark-train speaks it, and any other program once the job's ranks
  // elsewhere said it (the command's waits_in_place), as a Python job's
  // under bulwark.run do. Another program run as a spare would train alone.
  RankGroupSpec spec = SpecFrom(c);
  const std::string program = spec.argv[0].substr(spec.argv[0].rfind('/') + 1);
  if (program != "bulwark-train" && !c.waits_in_place()) {
    supervisor_.StopSpares();
    staging_.reset();
    spare_spec_.reset();
    ReportWarm(false, program + " is not known to wait for an ASSIGN (no rank of the job said INPLACE yet)");
    return;
  }
  supervisor_.StopSpares({Supervisor::Identity(spec)});
  staging_.reset();
  spare_spec_ = spec;
  gen_.saw_step = true;
  gen_.in_place = true;
  gen_.spares_started = 0;
  warm_unanswered_ = true;
  Log("standing by warm for " + c.reason().substr(c.reason().rfind(' ') + 1));
}

void Agent::Inject(const std::string& fault, int rank, const std::string& where, double factor) {
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

void Agent::Trace(const std::string& id) {
  std::map<int, pid_t> pids = supervisor_.Pids();
  Log("capturing the stacks of " + std::to_string(pids.size()) + " rank(s) for " + id);
  const auto started = std::chrono::steady_clock::now();  // how long a real call took, for the log
  workers_.Start([this, id, pids, started] {
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
    // A controller that no longer leads (a failover while the stacks were
    // captured) refuses them with UNAVAILABLE, naming the leader if it
    // knows one: they go there, as reports do, for as long as a failover
    // takes (up --ha: a 5 s lease and a catch-up). Any other answer ends it.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    grpc::Status st;
    std::string at;
    for (bool first = true; first || (std::chrono::steady_clock::now() < until && !g_stop); first = false) {
      if (!first) std::this_thread::sleep_for(std::chrono::milliseconds(250));
      auto rpc = wire::AgentService::NewStub(Channel(&at));
      grpc::ClientContext ctx;
      Prepare(&ctx, kCallDeadline);
      wire::StacksReply reply;
      st = rpc->UploadStacks(&ctx, req, &reply);
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      MaybeMoveOn(at, st, ctx);
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    Log((st.ok() ? "sent the stacks for " : "sending the stacks for ") + id + (st.ok() ? " to " + at : " failed: " + st.error_message()) +
        " (" + std::to_string(static_cast<int>(ms)) + " ms after the request)");
  });
}

void Agent::Diagnose(const wire::Command& c) {
  if (!diagnosed_.insert(c.id()).second) return;  // a resent command
  // The periodic bitwise check runs beside the ranks, the alignment test
  // alone (controller/policy_align.cc). The ladder's tests need the machine
  // to themselves; the controller's STOP_RANKS for the same decision may
  // arrive after this one-shot.
  const bool beside = c.check() != 0;
  if (beside) shards_->KeepDurable({c.keep_steps().begin(), c.keep_steps().end()});
  if (!beside) {
    supervisor_.StopAll();
    supervisor_.StopSpares();
    staging_.reset();
    spare_spec_.reset();
    EndGeneration();
  }
  DiagnosticsRequest req;
  if (beside) req.tests = {"alignment"};
  else req.tests.assign(c.tests().begin(), c.tests().end());
  req.budget = std::chrono::milliseconds(c.budget_ms() > 0 ? c.budget_ms() : 60000);
  req.health = health_paths_;
  {
    char self[4096];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    const std::string exe = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string();
    if (!exe.empty()) req.net_check_binary = exe.substr(0, exe.rfind('/') + 1) + "bulwark-train";
  }
  req.trainer_argv = AlignmentArgv(job_argv_, AlignmentTrainer(req.net_check_binary), beside);
  for (const wire::ReplayAssignment& x : c.replay()) {
    req.replay.push_back({x.group(), x.rank(), x.world(), x.master_addr(), x.master_port(), std::max(1, x.pp()),
                          x.pp() > 1 ? x.stage() : -1});
  }
  const int64_t incident = c.incident(), check = c.check();
  const std::string what = beside ? "periodic bitwise check " + std::to_string(check) + ", beside the ranks"
                                  : "incident " + std::to_string(incident);
  Log("running diagnostics for " + what + " (" + std::to_string(req.tests.size()) + " test(s), budget " +
      std::to_string(req.budget.count()) + " ms)");
  workers_.Start([this, req, incident, check, what] {
    DiagnosticsOutcome out = RunDiagnostics(req);
    wire::AgentEvent e;
    e.set_kind(wire::AgentEvent::DIAGNOSTICS);
    e.set_incident(incident);
    e.set_check(check);
    e.set_alignment_hash(out.alignment_hash);
    std::string line;
    for (const TestOutcome& t : out.results) {
      wire::TestResult* r = e.add_results();
      r->set_test(t.test);
      r->set_passed(t.passed);
      r->set_detail(t.detail);
      r->set_ms(t.ms);
      line += " " + t.test + (t.passed ? " ok " : " FAILED ") + std::to_string(static_cast<int>(t.ms)) + " ms";
      // What a replay group ran (its layout) and its hash.
      if (t.test.rfind("replay", 0) == 0 && !t.detail.empty()) line += " (" + t.detail + ")";
    }
    Log("diagnostics for " + what + ":" + line);
    MutexLock lock(&diagnostics_mu_);
    diagnostics_done_.push_back(std::move(e));
  });
}

void Agent::EmitDiagnostics() {
  std::vector<wire::AgentEvent> done;
  {
    MutexLock lock(&diagnostics_mu_);
    done.swap(diagnostics_done_);
  }
  for (wire::AgentEvent& e : done) Emit(std::move(e));
}

std::shared_ptr<const ProgressPattern> Agent::ProgressFrom(const wire::Command& c) {
  auto it = c.env().find(kProgressRegexEnv);
  if (it == c.env().end() || it->second.empty()) return nullptr;
  Result<ProgressPattern> p = ProgressPattern::Compile(it->second);
  if (!p.ok()) {
    Log("no progress from the ranks' output: " + p.status().message());
    return nullptr;
  }
  return std::make_shared<const ProgressPattern>(std::move(*p));
}

void Agent::AwaitWaitingRanks(const RankGroupSpec& spec) {
  // Only ranks that said INPLACE ever wait: any other program's survivors
  // are stopped at once, as before.
  if (!gen_.in_place) return;
  // An elastic job's generation may come while its ranks train well (it
  // grows back, trainer/step/elastic.h): they are asked to stop between steps
  // and keep their state. A peer lost meanwhile is this request's doing,
  // not a fault to report.
  yielding_ = spec.elastic;
  // A generation narrower than the running one lost members (a machine, a
  // switch's rack): a rank inside a collective with them cannot finish it,
  // and one between steps takes an abort as a yield. So the abort goes at
  // once, not after half the wait for a yield that cannot come (it was 0.5 s
  // of a switch-down's recovery, issue 38). A grow still asks for a yield:
  // its ranks finish the step they are in.
  const bool lost_members = yielding_ && spare_spec_ && spec.world_size < spare_spec_->world_size;
  if (yielding_ && CanSplice(spec)) {
    // A grow spliced in between steps: the ranks train on and get the new
    // generation as they do (StartRanks hands them over as waiting ones);
    // they move to it together, after one step's vote, and only the
    // joiner's ring neighbours link anew (docs/recovery.md).
    for (const auto& [rank, pid] : supervisor_.Pids()) supervisor_.MarkWaiting(pid);
    splicing_ = true;
    yielding_ = false;
    Log("generation " + std::to_string(spec.generation) + " grows to " + std::to_string(spec.world_size) +
        " ranks: spliced in while the ranks here train");
    return;
  }
  if (yielding_) {
    const std::string word = lost_members ? "INJECT abort" : "INJECT yield";
    for (const auto& [rank, pid] : supervisor_.Pids()) {
      if (Status st = links_->Send(pid, word); !st.ok()) Log("rank " + std::to_string(rank) + ": cannot ask it to yield: " + st.ToString());
    }
    if (lost_members) {
      Log("generation " + std::to_string(spec.generation) + " is narrower (" + std::to_string(spec.world_size) + " of " +
          std::to_string(spare_spec_->world_size) + " ranks): asked the ranks to abort their collective at once");
    }
  }
  // A wait on real processes, in real time (not the agent's clock, which
  // a test may hold still).
  const auto start = std::chrono::steady_clock::now(), end = start + kRejoinWait;
  bool aborted = lost_members;
  while (supervisor_.AnyLiveNotWaiting(spec) && std::chrono::steady_clock::now() < end) {
    // A rank that has not yielded by half time is stuck in a collective
    // whose peer hangs (a frozen machine sends neither data nor EOF): it is
    // told to end that collective and keep its state, rather than be
    // stopped with it. A rank waiting already skips the word.
    if (yielding_ && !aborted && std::chrono::steady_clock::now() >= start + kRejoinWait / 2) {
      aborted = true;
      for (const auto& [rank, pid] : supervisor_.Pids()) (void)links_->Send(pid, "INJECT abort");
      Log("ranks not yielding after " + std::to_string(kRejoinWait.count() / 2) + " ms: asked to abort their collective");
    }
    ForwardRankLinks(/*progress=*/false);
    WatchRanks();  // a rank that exits instead is an exit, as before
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  yielding_ = false;
}

bool Agent::CanSplice(const RankGroupSpec& spec) const {
  if (!spare_spec_ || spec.world_size <= spare_spec_->world_size) return false;  // a grow only
  const std::map<int, pid_t>& live = supervisor_.Pids();
  if (live.empty() || live.size() != spec.ranks.size()) return false;
  for (const auto& [rank, pid] : live) {
    if (gen_.spliceable.count(rank) == 0) return false;
  }
  for (const auto& [rank, local] : spec.ranks) {
    auto env = spec.rank_env.find(rank);
    if (env == spec.rank_env.end() || env->second.count(rank_client::kRingPlanEnv) == 0) return false;
  }
  return true;
}

void Agent::StartRanks(const RankGroupSpec& spec, const std::string& reason) {
  warm_unanswered_ = false;
  Result<std::vector<Handoff>> started = supervisor_.Start(spec);
  if (!started.ok()) {
    Log("generation " + std::to_string(spec.generation) + ": starting " + std::to_string(spec.ranks.size()) +
        " ranks failed (" + reason + "): " + started.status().ToString());
    return;
  }
  std::string how;
  bool retry_cold = false;
  for (const Handoff& h : *started) {
    how += " " + std::to_string(h.rank) + ":" + HandoffPathName(h.path);
    if (h.path == HandoffPath::kCold) continue;
    rank_client::RankAssignment a;
    a.generation = spec.generation;
    a.rank = h.rank;
    for (const auto& [r, local] : spec.ranks) {
      if (r == h.rank) a.local_rank = local;
    }
    a.world_size = spec.world_size;
    a.local_world_size = spec.local_world_size;
    a.master_addr = spec.master_addr;
    a.master_port = spec.master_port;
    auto re = spec.rank_env.find(h.rank);
    if (re != spec.rank_env.end() && re->second.count(rank_client::kShardBackupOfEnv)) {
      a.backup_of = std::atoi(re->second.at(rank_client::kShardBackupOfEnv).c_str());
    }
    if (re != spec.rank_env.end() && re->second.count(rank_client::kRingPlanEnv)) {
      a.ring_plan = re->second.at(rank_client::kRingPlanEnv);
      a.ring_addr = re->second.at(rank_client::kRingAddrEnv);
    }
    a.log_path = supervisor_.LogPath(h.rank);
    const bool splice = splicing_ && h.path == HandoffPath::kRejoin;
    if (Status st = links_->Send(h.pid, a.Format(splice ? "SPLICE" : "ASSIGN")); !st.ok()) {
      Log("rank " + std::to_string(h.rank) + ": cannot hand it to pid " + std::to_string(h.pid) + ": " + st.ToString());
      retry_cold = true;
    }
  }
  splicing_ = false;
  if (retry_cold) {
    // A process that cannot hear its ASSIGN is no use: all cold.
    started = supervisor_.Start(spec, /*reuse=*/false);
    how = " all cold (a handoff failed)";
  }
  Log("generation " + std::to_string(spec.generation) + ": started " + std::to_string(spec.ranks.size()) +
      " ranks (" + reason + "):" + how + (started.ok() ? "" : ": " + started.status().ToString()));
}

void Agent::MaybePrespawn() {
  // Once the generation trains (its start-up must not share the CPU with
  // a spare's), keep one spare per local rank of the job.
  // Only a program that said it can wait for an ASSIGN gets spares: another
  // would run the whole job on its own.
  const size_t want = static_cast<size_t>(std::max(1, spare_spec_ ? spare_spec_->local_world_size : 1));
  if (!spare_spec_ || !gen_.in_place || !gen_.saw_step ||
      supervisor_.SpareCount(Supervisor::Identity(*spare_spec_)) >= want) {
    return;
  }
  // Spares that keep dying (the job cannot set up here: a pipeline job, a
  // broken install) are not replaced forever: a few per generation.
  if (gen_.spares_started >= 2 * want) return;
  ++gen_.spares_started;
  if (Status st = supervisor_.Prespawn(*spare_spec_); !st.ok()) Log("cannot pre-spawn a spare: " + st.ToString());
}

void Agent::MaybeReportWarm() {
  if (!warm_unanswered_ || !spare_spec_) return;
  const std::string identity = Supervisor::Identity(*spare_spec_);
  const size_t want = static_cast<size_t>(std::max(1, spare_spec_->local_world_size));
  if (supervisor_.WaitingSpareCount(identity) >= want) {
    ReportWarm(true, std::to_string(want) + " spare(s) set up and waiting");
  } else if (gen_.spares_started >= 2 * want && supervisor_.SpareCount(identity) == 0) {
    ReportWarm(false, "its spares did not set up (spare-*.log)");
  }
}

void Agent::ReportWarm(bool warm, const std::string& detail) {
  warm_unanswered_ = false;
  Log(std::string(warm ? "warm: " : "cold: ") + detail);
  wire::AgentEvent e;
  e.set_kind(wire::AgentEvent::STANDBY_READY);
  e.set_staged(warm);
  e.set_detail(detail);
  Emit(std::move(e));
}

}  // namespace bulwark::agent::detail
