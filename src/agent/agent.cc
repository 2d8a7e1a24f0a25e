#include "agent/agent_impl.h"

#include "cluster/controllers.h"
#include "cluster/fence.h"
#include "common/ring_layout.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace bulwark::agent {
namespace detail {
namespace {

// The ring slots' ports: kRingSlotPorts consecutive ports on `host`, above the
// kernel's ephemeral range (32768-60999), so no outgoing connection takes
// one while the slot's rank restarts; the controller's rendezvous ports
// (launch.h) lie below it. They stay reserved for the agent's life: bound
// here, never listened on, and marked SO_REUSEPORT only after the bind, so
// another agent's probe (a plain bind) is refused while the slot's rank
// (trainer/comm/ring.h, SO_REUSEPORT too) binds and listens. "" when none
// are free.
std::string ReserveRingSlots(const std::string& host, std::vector<int>* fds) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) return "";
  const int span = (65500 - 61000) / kRingSlotPorts;
  for (int tries = 0, at = static_cast<int>(::getpid() % span); tries < span; ++tries, at = (at + 1) % span) {
    const int base = 61000 + at * kRingSlotPorts;
    std::vector<int> held;
    for (int port = base; port < base + kRingSlotPorts; ++port) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      a.sin_port = htons(static_cast<uint16_t>(port));
      const int one = 1;
      if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
          ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) {
        if (fd >= 0) ::close(fd);
        break;
      }
      held.push_back(fd);
    }
    if (static_cast<int>(held.size()) == kRingSlotPorts) {
      *fds = std::move(held);
      return host + ":" + std::to_string(base);
    }
    for (int fd : held) ::close(fd);
  }
  return "";
}

}  // namespace

Status Agent::Run() {
  std::thread commands([this] { CommandLoop(); });
  auto next_report = Now();
  auto next_inspect = Now();
  while (!g_stop) {
    ApplyCommands();
    EmitDiagnostics();
    // The rank links first: their step reports carry the rank's own time of
    // the step, the log line of the same step only the time it was read.
    ReadRankLinks();
    WatchRanks();
    ReleaseEchoes();
    if (Now() >= next_inspect) {
      InspectMachine();
      next_inspect = Now() + kInspectPeriod;
    }
    // Report at once when there is news; otherwise the heartbeat period.
    if (Now() >= next_report || !pending_.empty() || signals_.urgent()) {
      Report();
      next_report = Now() + kReportPeriod;
    }
    MaybeFence();
    MaybePrespawn();
    MaybeReportWarm();
    MaybeReportStaged();
    PublishMetrics();
    // A command wakes the loop at once: a restart must not wait a period.
    // So does a rank's exit: the controller decides on its report.
    workers_.Reap();
    WatchExits();
    const auto wake = std::chrono::steady_clock::now() + kLoopPeriod;
    MutexLock lock(&queue_mu_);
    while (queue_.empty() && !rank_ended_ && !g_stop && queue_cv_.WaitUntil(&queue_mu_, wake)) {
    }
    rank_ended_ = false;
  }
  metrics_.reset();  // before the state its callback reads goes
  supervisor_.StopAll();
  workers_.JoinAll();
  {
    // Ends a stream blocked in Read now rather than at its deadline.
    MutexLock lock(&stream_mu_);
    if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
  }
  commands.join();
  return refused_;
}

std::shared_ptr<grpc::Channel> Agent::Channel(std::string* addr) {
  MutexLock lock(&channel_mu_);
  // Re-read each time: a lone controller restarted rewrites its address.
  const std::vector<std::string> list = cluster::ControllerAddresses(layout_, o_.controllers);
  const std::string a = !target_.empty() && list.size() > 1 ? target_ : list.empty() ? "" : list.front();
  if (addr != nullptr) *addr = a;
  if (!channel_ || a != channel_addr_) {
    // gRPC's default reconnect backoff grows to minutes; a restarted
    // controller must hear from its agents within its reconnect grace.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
    // A partition leaves the TCP connection open with nothing arriving:
    // without pings the command stream waits out its 30 s deadline and
    // reports time out on a dead connection until TCP gives up (minutes).
    // A ping unanswered within a second closes it, and the next call
    // connects afresh once the network is back.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 1000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    Result<std::shared_ptr<grpc::ChannelCredentials>> creds = cluster::ChannelCredentials(layout_);
    if (!creds.ok()) AgentLog().Error("cannot use the cluster's TLS credentials: " + creds.status().ToString());
    channel_ = grpc::CreateCustomChannel(a, creds.ok() ? *creds : grpc::InsecureChannelCredentials(), args);
    channel_addr_ = a;
  }
  return channel_;
}

void Agent::MaybeMoveOn(const std::string& addr, const grpc::Status& st, const grpc::ClientContext& ctx) {
  // A leader's own answers (refused, past a deadline under load) are not
  // reasons to leave it; only a controller that is not there or not leading.
  if (st.error_code() != grpc::StatusCode::UNAVAILABLE && st.error_code() != grpc::StatusCode::UNIMPLEMENTED) return;
  const auto& trailers = ctx.GetServerTrailingMetadata();
  auto hint = trailers.find(cluster::kLeaderMetadataKey);
  const std::string leader = hint == trailers.end() ? "" : std::string(hint->second.data(), hint->second.size());
  MutexLock lock(&channel_mu_);
  if (addr != channel_addr_) return;
  const std::vector<std::string> list = cluster::ControllerAddresses(layout_, o_.controllers);
  if (list.size() < 2) return;
  const std::string next = cluster::NextController(list, addr, leader);
  if (next == addr) return;
  Log("controller at " + addr + " does not serve (" + st.error_message() + "); trying " + next +
      (leader.empty() ? "" : ", which it names as the leader"));
  target_ = next;
}

void Agent::Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds deadline) {
  ctx->AddMetadata(kTokenMetadataKey, token_);
  ctx->set_deadline(std::chrono::system_clock::now() + deadline);  // gRPC deadlines are real time
}

bool Agent::Register() {
  std::string at;
  auto rpc = wire::AgentService::NewStub(Channel(&at));
  grpc::ClientContext ctx;
  Prepare(&ctx, kCallDeadline);
  wire::RegisterRequest req;
  req.set_machine(o_.machine);
  req.set_machine_dir(layout_.machine(o_.machine));
  req.set_incarnation(incarnation_);
  req.set_shard_addr(shards_->addr());
  req.set_domain(o_.domain);
  // Fixed for the agent's life: the plans of a job's ranks name it.
  if (ring_addr_.empty()) ring_addr_ = ReserveRingSlots(Address(), &ring_fds_);
  req.set_ring_addr(ring_addr_);
  wire::RegisterReply reply;
  grpc::Status st = rpc->Register(&ctx, req, &reply);
  if (!st.ok()) {
    MaybeMoveOn(at, st, ctx);
    if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED) LogWarn("controller refused registration: " + st.error_message());
    // Refused for what it is, not for a passing fault: retrying cannot help,
    // and an agent left running would look like a machine (issue 40).
    if (st.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      refused_ = Status::FailedPrecondition(st.error_message());
      AgentLog().Error(st.error_message());
      g_stop = true;
    }
    return false;
  }
  Log("registered " + o_.machine + " with the controller at " + at);
  registered_at_ = at;
  return true;
}

void Agent::CommandLoop() {
  while (!g_stop) {
    std::string at;
    auto rpc = wire::AgentService::NewStub(Channel(&at));
    grpc::ClientContext ctx;
    Prepare(&ctx, std::chrono::duration_cast<std::chrono::milliseconds>(kStreamDeadline));
    {
      MutexLock lock(&stream_mu_);
      stream_ctx_ = &ctx;
    }
    wire::CommandStreamRequest req;
    req.set_machine(o_.machine);
    req.set_incarnation(incarnation_);
    auto reader = rpc->Commands(&ctx, req);
    wire::Command c;
    while (!g_stop && reader->Read(&c)) {
      {
        MutexLock lock(&queue_mu_);
        queue_.push_back(c);
      }
      queue_cv_.NotifyOne();
    }
    MaybeMoveOn(at, reader->Finish(), ctx);
    {
      MutexLock lock(&stream_mu_);
      stream_ctx_ = nullptr;
    }
    if (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
}

void Agent::Report() {
  std::string at;
  std::shared_ptr<grpc::Channel> channel = Channel(&at);
  // A controller newly led to (a failover) hears the registration first.
  if (!registered_ || at != registered_at_) {
    registered_ = Register();
    if (!registered_) return;
    channel = Channel(&at);
  }
  auto rpc = wire::AgentService::NewStub(channel);
  grpc::ClientContext ctx;
  // A report waiting on an unreachable controller must not hold the loop
  // past the fence (MaybeFence runs after it).
  auto deadline = std::chrono::duration_cast<std::chrono::milliseconds>(kCallDeadline);
  if (o_.fence_timeout.count() > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(last_ok_sent_ + o_.fence_timeout - Now());
    deadline = std::clamp(left, std::chrono::milliseconds(100), deadline);
  }
  Prepare(&ctx, deadline);
  wire::ReportRequest req;
  req.set_machine(o_.machine);
  req.set_incarnation(incarnation_);
  req.set_generation(supervisor_.generation());
  req.set_device_slowdown(device_slowdown_);
  for (int r : supervisor_.LiveRanks()) req.add_live_ranks(r);
  for (const std::string& peer : gen_.peers_closed) req.add_peers_closed(peer);
  // Said by this generation's ranks (a standby's own flag is its command's).
  req.set_ranks_wait_in_place(gen_.in_place && supervisor_.generation() > 0 && !supervisor_.LiveRanks().empty());
  for (const auto& [rank, step] : gen_.finished) {
    wire::FinishedRank* f = req.add_finished();
    f->set_rank(rank);
    f->set_step(step);
  }
  // A fenced machine's copies are offered to no restore (MaybeFence).
  for (const ShardHolding& h : fenced_generation_ ? std::vector<ShardHolding>{} : shards_->Holdings()) {
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
  const auto sent = Now();
  grpc::Status st = rpc->Report(&ctx, req, &reply);
  if (st.ok()) {
    last_report_ok_ = Now();
    last_ok_sent_ = sent;
    while (!pending_.empty() && pending_.front().seq() <= reply.acked_seq()) pending_.pop_front();
    return;
  }
  // The controller forgot us (restarted without our registration): register again.
  if (st.error_code() == grpc::StatusCode::FAILED_PRECONDITION) registered_ = false;
  MaybeMoveOn(at, st, ctx);
  // Otherwise the events stay queued and go with the next report.
}

void Agent::Emit(wire::AgentEvent e) {
  e.set_seq(++seq_);
  if (e.observed_ms() == 0) e.set_observed_ms(Ms(Now()));
  e.set_generation(supervisor_.generation());
  pending_.push_back(std::move(e));
}

namespace {
std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}
}  // namespace

// Cut off from the controller for the fence timeout: it may already count
// this machine as dead and have given its ranks to a standby. The ranks
// stop here, so that no rank runs twice, and their exits go out as
// peer-lost (the controller, not this machine, was lost) once a report
// gets through; the copies held here are withheld from restores.
void Agent::MaybeFence() {
  if (fenced_generation_ || !FenceDue(Now(), last_ok_sent_, o_.fence_timeout)) return;
  fenced_generation_ = supervisor_.generation();
  const std::vector<int> ranks = supervisor_.LiveRanks();
  supervisor_.StopAll();
  supervisor_.StopSpares();
  EndGeneration();
  const double silent_s = std::chrono::duration<double>(Now() - last_ok_sent_).count();
  for (int r : ranks) {
    wire::AgentEvent e;
    e.set_kind(wire::AgentEvent::RANK_EXITED);
    e.set_rank(r);
    e.set_exit_code(kExitPeerLost);
    e.set_signature("fenced");
    e.set_detail("fenced: no report reached the controller for " + FormatSeconds(silent_s));
    e.set_generation(*fenced_generation_);
    Emit(e);
  }
  LogWarn("fenced: no report has reached the controller for " + FormatSeconds(silent_s) + " (fence timeout " +
          FormatSeconds(std::chrono::duration<double>(o_.fence_timeout).count()) + "): stopped " +
          std::to_string(ranks.size()) + " rank(s) of generation " + std::to_string(*fenced_generation_) +
          "; the copies held here are withheld until a restart takes this machine back");
}

// The first command after a fence says whether the job went on without
// this machine: a restart in the next generation (or the same one, resent
// by a restarted controller) takes it back with its copies; anything else
// (a stop: evicted, or a later generation) means they may be stale.
void Agent::Unfence(const wire::Command& c) {
  if (!fenced_generation_) return;
  const bool back = c.kind() == wire::Command::START_RANKS && c.generation() <= *fenced_generation_ + 1;
  if (!back) shards_->Forget();
  Log(std::string("unfenced by ") + (c.kind() == wire::Command::START_RANKS ? "a restart" : "a stop") +
      " of generation " + std::to_string(c.generation()) + (back ? ": its copies are offered again" : ": forgot its copies, the job went on without them"));
  fenced_generation_.reset();
}

void Agent::PublishMetrics() {
  // A rank whose process changed since the last look was restarted here.
  // A rank that started and died between two looks (100 ms) is missed here
  // but counted among the exits.
  for (const auto& [rank, pid] : supervisor_.Pids()) {
    auto [it, first] = seen_pids_.try_emplace(rank, pid);
    if (!first && it->second != pid) {
      ++rank_restarts_[rank];
      it->second = pid;
    }
  }
  AgentSnapshot s;
  s.machine = o_.machine;
  s.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  s.registered = registered_;
  s.since_report_ok_s = std::chrono::duration<double>(Now() - last_report_ok_).count();
  s.generation = supervisor_.generation();
  s.live_ranks = supervisor_.LiveRanks();
  s.rank_restarts = rank_restarts_;
  s.rank_exits = rank_exits_;
  s.job_step = gen_.reported_step;
  s.inspected = health_.has_value();
  if (health_) s.health = *health_;
  s.inspection_failures = inspection_failures_;
  MutexLock lock(&metrics_mu_);
  snapshot_ = std::move(s);
}

// The port an earlier start recorded in agent.metrics, or 0.
int RecordedMetricsPort(const std::string& path) {
  Result<std::string> url = ReadFile(path);
  if (!url.ok()) return 0;
  const size_t colon = url->rfind(':');
  return colon == std::string::npos ? 0 : std::atoi(url->c_str() + colon + 1);
}

void Agent::ServeMetrics(int port) {
  auto render = [this] {
    AgentSnapshot s;
    {
      MutexLock lock(&metrics_mu_);
      s = snapshot_;
    }
    return RenderAgentMetrics(s, shards_->Holdings(), shards_->Stats());
  };
  const std::string who = "bulwark agent " + o_.machine;
  const int want = port >= 0 ? port : RecordedMetricsPort(layout_.agent_metrics(o_.machine));
  Result<std::unique_ptr<MetricsServer>> m = MetricsServer::Start(Address(), want, render, who);
  if (!m.ok() && port < 0 && want != 0) {
    Log(m.status().message() + "; serving metrics on another port");
    m = MetricsServer::Start(Address(), 0, render, who);
  }
  if (!m.ok()) {
    LogWarn("no metrics: " + m.status().message());
    return;
  }
  metrics_ = std::move(*m);
  if (Status st = WriteFileAtomic(layout_.agent_metrics(o_.machine), metrics_->url() + "\n"); !st.ok()) {
    Log(st.ToString());
  }
  // One file_sd list per machine, so that agents never write the same file;
  // a scrape config globs them (config/prometheus/prometheus.yml).
  if (Status st = MakeDirs(layout_.dir + "/metrics.d"); !st.ok()) Log(st.ToString());
  const std::string targets = nlohmann::json::array(
      {{{"targets", {Address() + ":" + std::to_string(metrics_->port())}},
        {"labels", {{"cluster", layout_.dir}, {"machine", o_.machine}, {"component", "agent"}}}}}).dump();
  if (Status st = WriteFileAtomic(layout_.agent_metrics_targets(o_.machine), targets + "\n"); !st.ok()) Log(st.ToString());
  Log("metrics at " + metrics_->url());
}

}  // namespace detail

using namespace detail;

namespace {

// This machine's address when --address is not given: the one the route to
// the controller leaves by. Connecting a UDP socket sends nothing; it only
// makes the kernel pick the source address, which getsockname reads. So a
// real host advertises the interface its peers share with the controller,
// and loopback only when the controller itself is on loopback (a local
// cluster without namespaces). 127.0.0.1 when the controller's address is
// not known yet.
std::string AddressTowardsController(const cluster::Layout& layout, const std::string& flag) {
  const std::string fallback = "127.0.0.1";
  const std::vector<std::string> controllers = cluster::ControllerAddresses(layout, flag);
  if (controllers.empty()) return fallback;
  const std::string& a = controllers.front();
  const size_t colon = a.rfind(':');
  const std::string host = colon == std::string::npos ? a : a.substr(0, colon);
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  // The port does not choose the route; "discard" stands in for the
  // controller's, which is 0 until the controller has bound one.
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) return fallback;
  std::string out = fallback;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in self{};
  socklen_t len = sizeof self;
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0) {
    char buf[INET_ADDRSTRLEN] = {};
    if (::inet_ntop(AF_INET, &self.sin_addr, buf, sizeof buf) != nullptr) out = buf;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return out;
}

}  // namespace

Status RunAgent(const AgentOptions& options) {
  const cluster::Layout layout{options.dir};
  if (options.machine.empty()) return Status::InvalidArgument("agent: --machine is required");
  g_log_machine = options.machine;
  Result<std::string> token = ReadToken(layout.token());
  if (!token.ok()) return token.status();
  Result<SignatureTable> sigs = options.builtin_signatures.empty() ? SignatureTable::Builtin()
                                                                   : SignatureTable::Load(options.builtin_signatures);
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
  // The agent's calls fail fast while the controller is away, so no thread
  // of ours waits on the channel, and gRPC notices that a reconnect attempt
  // completed only when its backup poller runs: every 5 s by default. Agents
  // took 3.5-9 s to reach a restarted controller that was serving (measured
  // here with GRPC_TRACE=handshaker: each attempt's TCP connect "timed out"
  // unpolled); polling every 100 ms brings that to about 1 s. Before gRPC
  // starts, which reads it once; an operator's own setting wins.
  ::setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100", /*overwrite=*/0);
  Log("machine " + options.machine + " up with " + std::to_string(sigs->size()) + " error signatures");
  const Logger shard_log("shard." + options.machine);
  AgentOptions o = options;
  if (o.fence_timeout.count() == 0) {
    Result<std::chrono::milliseconds> fence = cluster::ReadFenceTimeout(layout);
    if (!fence.ok()) return fence.status();
    o.fence_timeout = *fence;
  }
  const std::string address = options.address.empty() ? AddressTowardsController(layout, options.controllers) : options.address;
  o.address = address;
  Log("advertising " + address + (options.address.empty() ? " (the interface towards the controller)" : ""));
  if (!options.address.empty() && !options.nic.empty()) {
    // Ranks and diagnostics bind Gloo to the machine's link, not to what the
    // shared hostname resolves to (127.0.0.1 here, another host's address
    // in a namespace); a job's own setting wins.
    ::setenv("GLOO_SOCKET_IFNAME", options.nic.c_str(), /*overwrite=*/0);
  }
  auto shards = ShardStore::Start(options.machine, layout.machine(options.machine) + "/shards.sock", address, *token,
                                 [shard_log](const std::string& line) { shard_log.Info(line); });
  if (!shards.ok()) return shards.status();
  auto links = RankLinkServer::Start(layout.machine(options.machine) + "/ranks.sock",
                                     [](const std::string& line) { Log(line); });
  if (!links.ok()) return links.status();
  if (o.fence_timeout.count() > 0) {
    Log("fencing: ranks stop after " + std::to_string(o.fence_timeout.count()) + " ms without a report through to the controller");
  }
  Agent agent(o, *token, std::move(*sigs), std::move(*shards), std::move(*links));
  agent.ServeMetrics(options.metrics_port);
  return agent.Run();
}

}  // namespace bulwark::agent
