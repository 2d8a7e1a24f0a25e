#include "plane/service.h"

#include <absl/synchronization/mutex.h>
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "bulwark.grpc.pb.h"
#include "cluster/fence.h"
#include "cluster/layout.h"
#include "cluster/local/emulator.h"
#include "cluster/local/netns.h"
#include "cluster/tls.h"
#include "common/files.h"
#include "common/token.h"
#include "controller/policy_json.h"
#include "plane/call_token.h"
#include "plane/codec.h"
#include "plane/command_streams.h"
#include "plane/fleet.h"
#include "plane/news.h"
#include "common/log.h"
#include "common/metrics_server.h"
#include "common/mutex.h"
#include "plane/plane.h"
#include "plane/report_latency.h"
#include "plane/workers.h"

namespace bulwark::plane {
namespace {

Time WallNow() {
  return TimeFromMs(std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count());
}

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (s.code()) {
    case Status::Code::kInvalidArgument: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case Status::Code::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case Status::Code::kFailedPrecondition: code = grpc::StatusCode::FAILED_PRECONDITION; break;
    case Status::Code::kUnavailable: code = grpc::StatusCode::UNAVAILABLE; break;
    case Status::Code::kPermissionDenied: code = grpc::StatusCode::UNAUTHENTICATED; break;
    default: break;
  }
  return grpc::Status(code, s.message());
}

// The controller process's logger; the Plane logs through the same name.
const Logger& ControllerLog() {
  static const Logger log("controller");
  return log;
}

// Agents' calls run on gRPC's callback API, their work on a few threads of
// our own (Workers), and their command streams on the asynchronous API
// (CommandStreams, which says why): neither an open command stream nor a
// report waiting for the plane's lock holds a thread.
using AgentServiceBase = wire::AgentService::WithCallbackMethod_Register<
    wire::AgentService::WithCallbackMethod_Report<wire::AgentService::WithCallbackMethod_UploadStacks<
        CommandStreams::Service>>>;
class AgentServiceImpl final : public AgentServiceBase {
 public:
  AgentServiceImpl(Fleet* fleet, std::string token) : fleet_(fleet), token_(token), streams_(this, fleet, token) {}

  CommandStreams& streams() { return streams_; }
  const ReportLatency& latency() const { return latency_; }

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const wire::RegisterRequest* req,
                                     wire::RegisterReply*) override {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    if (auto st = CheckToken(ctx, token_, "Register"); !st.ok()) {
      r->Finish(st);
      return r;
    }
    calls_.Post([this, r, req] { r->Finish(ToGrpc(fleet_->For(req->machine())->Register(*req, WallNow()))); });
    return r;
  }

  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx, const wire::ReportRequest* req,
                                   wire::ReportReply* reply) override {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    if (auto st = CheckToken(ctx, token_, "Report"); !st.ok()) {
      r->Finish(st);
      return r;
    }
    // In the controller's hands from now until answered (Plane::Arrived):
    // the wait in the queue and for the lock is ours, not the agent's silence.
    Plane* arrived_at = fleet_->For(req->machine());
    arrived_at->Arrived(req->machine(), req->incarnation(), WallNow());
    const auto arrived = std::chrono::steady_clock::now();
    calls_.Post([this, r, req, reply, arrived_at, arrived] {
      Plane* plane = fleet_->For(req->machine());  // it may have moved to a job meanwhile
      Result<int64_t> acked = plane->Report(*req, WallNow());
      if (acked.ok()) reply->set_acked_seq(*acked);
      // An agent sends its next report only once this one is answered, so
      // its silence starts here, not at the arrival: a reply held back by
      // the controller's own backlog is not the agent's (issue 36: at
      // 12,500 agents replies 2 s late evicted healthy machines).
      arrived_at->Answered(req->machine(), req->incarnation(), WallNow());
      if (plane != arrived_at) plane->Heard(req->machine(), req->incarnation(), WallNow());
      latency_.Add(std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - arrived));
      r->Finish(ToGrpc(acked.status()));
    }, HasNews(*req));
    return r;
  }

  grpc::ServerUnaryReactor* UploadStacks(grpc::CallbackServerContext* ctx, const wire::StacksRequest* req,
                                         wire::StacksReply*) override {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    if (auto st = CheckToken(ctx, token_, "UploadStacks"); !st.ok()) {
      r->Finish(st);
      return r;
    }
    calls_.Post([this, r, req] { r->Finish(ToGrpc(fleet_->For(req->machine())->UploadStacks(*req, WallNow()))); },
                HasNews(*req));
    return r;
  }


 private:
  Fleet* fleet_;
  std::string token_;
  CommandStreams streams_;
  ReportLatency latency_;
  // Declared last, destroyed first: it drains what is queued before the
  // plane pointer and token go (the server, destroyed before this service,
  // has ended every call by then).
  Workers calls_{3};  // Register, Report, UploadStacks
};

class ControlServiceImpl final : public wire::ControlService::Service {
 public:
  ControlServiceImpl(Fleet* fleet, std::string token) : fleet_(fleet), token_(std::move(token)) {}

  grpc::Status Submit(grpc::ServerContext* ctx, const wire::SubmitRequest* req, wire::SubmitReply* reply) override {
    if (auto st = CheckToken(ctx, token_, "Submit"); !st.ok()) return st;
    JobLaunch l;
    l.spec.id = req->name();
    l.spec.world_size = req->world_size();
    l.spec.ranks_per_machine = req->ranks_per_machine();
    l.argv.assign(req->argv().begin(), req->argv().end());
    l.env.insert(req->env().begin(), req->env().end());
    // As the wire says: 0 never persists. The CLI sends its own default.
    l.persist_every = req->persist_every();
    l.spec.tp = req->tp() > 0 ? req->tp() : 1;
    l.spec.pp = req->pp() > 0 ? req->pp() : 1;
    l.durable_dir = req->durable_dir();
    l.policy.insert(req->policy().begin(), req->policy().end());
    if (!req->recovery().empty()) {
      Result<JobSpec::Recovery> r = ParseRecovery(req->recovery());
      if (!r.ok()) return ToGrpc(r.status());
      l.spec.recovery = *r;
    }
    if (req->provisioning_delay_ms() >= 0) l.spec.provisioning_delay = Duration(req->provisioning_delay_ms());
    Result<std::string> id = fleet_->Submit(std::move(l), req->named(), WallNow());
    if (!id.ok()) return ToGrpc(id.status());
    reply->set_job(*id);
    return grpc::Status::OK;
  }
  // Reads are open to anyone who can reach the controller: they change nothing.
  grpc::Status Status(grpc::ServerContext*, const wire::QueryRequest*, wire::JsonReply* r) override {
    nlohmann::json j = fleet_->StatusJson(WallNow());
    if (ha_status) j.update(nlohmann::json::parse(ha_status()));
    r->set_json(j.dump());
    return grpc::Status::OK;
  }
  std::function<std::string()> ha_status;  // ControllerOptions::ha_status
  grpc::Status Incidents(grpc::ServerContext*, const wire::QueryRequest* q, wire::JsonReply* r) override {
    Result<Plane*> plane = fleet_->Job(q->job());
    if (!plane.ok()) return ToGrpc(plane.status());
    r->set_json((*plane)->IncidentsJson().dump());
    return grpc::Status::OK;
  }
  grpc::Status Ledger(grpc::ServerContext*, const wire::QueryRequest* q, wire::JsonReply* r) override {
    Result<Plane*> plane = fleet_->Job(q->job());
    if (!plane.ok()) return ToGrpc(plane.status());
    r->set_json((*plane)->LedgerJson(WallNow()).dump());
    return grpc::Status::OK;
  }
  grpc::Status Inject(grpc::ServerContext* ctx, const wire::InjectRequest* req, wire::InjectReply*) override {
    if (auto st = CheckToken(ctx, token_, "Inject"); !st.ok()) return st;
    // A machine's fault is its job's; one without a machine, the first job's.
    Plane* plane = req->machine().empty() ? fleet_->Job("").value() : fleet_->For(req->machine());
    return ToGrpc(plane->Inject(*req));
  }
  grpc::Status ReturnMachine(grpc::ServerContext* ctx, const wire::ReturnMachineRequest* req,
                             wire::ReturnMachineReply* reply) override {
    if (auto st = CheckToken(ctx, token_, "ReturnMachine"); !st.ok()) return st;
    Result<std::string> note = fleet_->For(req->machine())->ReturnMachine(req->machine(), WallNow());
    if (!note.ok()) return ToGrpc(note.status());
    reply->set_note(*note);
    return grpc::Status::OK;
  }
  grpc::Status Update(grpc::ServerContext* ctx, const wire::UpdateRequest* req, wire::UpdateReply* reply) override {
    if (auto st = CheckToken(ctx, token_, "Update"); !st.ok()) return st;
    JobSpec spec;
    spec.id = req->name();
    spec.world_size = req->world_size();
    spec.ranks_per_machine = req->ranks_per_machine();
    spec.tp = req->tp() > 0 ? req->tp() : 1;
    spec.pp = req->pp() > 0 ? req->pp() : 1;
    Release r;
    r.argv.assign(req->argv().begin(), req->argv().end());
    r.env.insert(req->env().begin(), req->env().end());
    r.now = req->now();
    r.why = req->why();
    r.who = req->who();
    r.binary_hash = req->binary_hash();
    Result<Plane*> plane = fleet_->Job(req->job());
    if (!plane.ok()) return ToGrpc(plane.status());
    Result<int> n = (*plane)->Update(std::move(r), spec, WallNow());
    if (!n.ok()) return ToGrpc(n.status());
    reply->set_release(*n);
    return grpc::Status::OK;
  }
  grpc::Status Rollback(grpc::ServerContext* ctx, const wire::RollbackRequest* req, wire::RollbackReply*) override {
    if (auto st = CheckToken(ctx, token_, "Rollback"); !st.ok()) return st;
    Result<Plane*> plane = fleet_->Job(req->job());
    if (!plane.ok()) return ToGrpc(plane.status());
    return ToGrpc((*plane)->Rollback(req->to(), req->why(), WallNow()));
  }
  grpc::Status Releases(grpc::ServerContext*, const wire::QueryRequest* q, wire::JsonReply* r) override {
    Result<Plane*> plane = fleet_->Job(q->job());
    if (!plane.ok()) return ToGrpc(plane.status());
    r->set_json((*plane)->ReleasesJson().dump());
    return grpc::Status::OK;
  }

 private:
  Fleet* fleet_;
  std::string token_;
};

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

// The port an earlier start recorded in controller.metrics, or 0.
int RecordedMetricsPort(const cluster::Layout& layout) {
  Result<std::string> url = ReadFile(layout.controller_metrics());
  if (!url.ok()) return 0;
  const size_t colon = url->rfind(':');
  return colon == std::string::npos ? 0 : std::atoi(url->c_str() + colon + 1);
}

// Metrics are for people and dashboards: a port that cannot be bound is
// logged, and the controller protects the job without them.
std::unique_ptr<MetricsServer> ServeMetrics(const cluster::Layout& layout, int port, Fleet* fleet,
                                            const ReportLatency* latency) {
  int want = port >= 0 ? port : RecordedMetricsPort(layout);
  const auto text = [fleet, latency] { return fleet->Metrics(WallNow()) + latency->Metrics(); };
  Result<std::unique_ptr<MetricsServer>> m = MetricsServer::Start("127.0.0.1", want, text);
  if (!m.ok() && port < 0 && want != 0) {
    // The recorded port is taken now (by whom is not ours to know): any port.
    ControllerLog().Warn(m.status().message() + "; serving metrics on another port");
    m = MetricsServer::Start("127.0.0.1", 0, text);
  }
  if (!m.ok()) {
    ControllerLog().Warn("no metrics: " + m.status().message());
    return nullptr;
  }
  if (Status st = WriteFileAtomic(layout.controller_metrics(), (*m)->url() + "\n"); !st.ok()) {
    ControllerLog().Error(st.ToString());
  }
  // For Prometheus's file_sd: a scrape config that follows the controller
  // to whatever port it got (config/prometheus/prometheus.yml).
  const std::string targets = nlohmann::json::array(
      {{{"targets", {"127.0.0.1:" + std::to_string((*m)->port())}}, {"labels", {{"cluster", layout.dir}}}}}).dump();
  if (Status st = WriteFileAtomic(layout.controller_metrics_targets(), targets + "\n"); !st.ok()) {
    ControllerLog().Error(st.ToString());
  }
  fleet->main()->set_metrics_url((*m)->url());
  ControllerLog().Info("metrics at " + (*m)->url());
  return std::move(*m);
}

// Where agents must be reachable: the controller's own host, and with
// namespaces (cluster/local/netns.h) each machine's address in its own.
AddressRules AddressRulesFor(const cluster::Layout& layout, const std::string& listen) {
  AddressRules r;
  const size_t colon = listen.rfind(':');
  r.controller_host = colon == std::string::npos ? listen : listen.substr(0, colon);
  // A name (Slurm's --listen, this host's name) as the address it resolves
  // to: a name that resolves to loopback serves one host, like 127.0.0.1.
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  if (::getaddrinfo(r.controller_host.c_str(), nullptr, &hints, &found) == 0 && found != nullptr) {
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, buf, sizeof buf);
    r.controller_host = buf;
  }
  if (found != nullptr) ::freeaddrinfo(found);
  Result<cluster::NetnsPlan> plan = cluster::LoadNetns(layout);
  if (!plan.ok()) return r;
  for (const cluster::NetnsMachine& m : plan->machines) r.namespaces[m.id] = {m.ns, m.address};
  const size_t dot = plan->gateway.rfind('.');
  if (dot != std::string::npos) r.subnet_prefix = plan->gateway.substr(0, dot + 1);  // the bridge is a /24
  return r;
}

// The policy fields `bulwark up --policy FILE` wrote (cluster/layout.h); a
// cluster without the file runs the shipped defaults. `up` checked the file
// before it started anything, so an error here is an edit made since.
Status ApplyPolicyFile(const cluster::Layout& layout, controller::PolicyConfig* p) {
  Result<std::string> text = ReadFile(layout.policy());
  if (!text.ok()) return text.status().code() == Status::Code::kNotFound ? Status::OK() : text.status();
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  Status s = j.is_discarded() ? Status::InvalidArgument("not JSON") : controller::ApplyPolicyJson(j, p);
  if (s.ok()) return s;
  return Status::InvalidArgument(layout.policy() + ": " + s.message() + "; fix it, or 'bulwark up --policy FILE' again");
}

}  // namespace

Status RunController(const ControllerOptions& options) {
  // Debian builds Abseil without NDEBUG, so its mutexes (every one of
  // gRPC's) ran the deadlock detector on each lock: a walk of one global
  // graph under one global lock, 7-10% of the controller's CPU at 12,500
  // agents and a point where all its threads queued (issue 36's profile,
  // docs/control-plane.md). Our own locks are std::mutex; ThreadSanitizer
  // and clang's thread-safety analysis check them.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const cluster::Layout layout{options.dir};
  Result<std::string> token = ReadToken(layout.token());
  if (!token.ok()) return token.status();
  Result<std::string> addr = ReadFile(layout.controller_addr());
  if (!addr.ok()) return addr.status().Annotate("controller address (written by 'bulwark up')");
  std::string address = *addr;
  while (!address.empty() && (address.back() == '\n' || address.back() == ' ')) address.pop_back();

  PlaneOptions po;
  po.db_path = layout.controller_db();
  po.create = options.init;
  po.open_journal = options.open_journal;
  po.job_journals = options.job_journals;
  // The file first: the flags below are the more explicit word.
  BULWARK_RETURN_IF_ERROR(ApplyPolicyFile(layout, &po.policy));
  BULWARK_RETURN_IF_ERROR(
      ApplyLadderFlags(options.ladder_rungs, options.ladder_tests, options.ladder_budget_s, &po.policy.ladder));
  // A cluster manager to tell of evictions and returns (docs/slurm.md).
  Result<std::unique_ptr<cluster::Backend>> backend = cluster::OpenBackend(layout, [](const std::string& line) {
    std::fprintf(stderr, "controller: %s\n", line.c_str());
    std::fflush(stderr);
  });
  if (!backend.ok()) return backend.status();
  po.backend = std::move(*backend);
  po.emulator = std::make_shared<cluster::Emulator>(layout);
  if (!options.daily_failure_rate.empty()) {
    char* end = nullptr;
    po.policy.daily_failure_rate = std::strtod(options.daily_failure_rate.c_str(), &end);
    if (end == options.daily_failure_rate.c_str() || *end != '\0') {
      return Status::InvalidArgument("--failure-rate '" + options.daily_failure_rate +
                                     "' is not a number; give a daily probability per machine, e.g. 0.05");
    }
  }
  BULWARK_RETURN_IF_ERROR(ApplyLadderAlignEvery(options.ladder_align_every_s, &po.policy.ladder));
  // The lease: a silent machine counts as dead only once it has certainly
  // fenced itself (cluster/fence.h).
  Result<std::chrono::milliseconds> fence = cluster::ReadFenceTimeout(layout);
  if (!fence.ok()) return fence.status();
  if (fence->count() > 0) {
    po.heartbeat_timeout = std::max<Duration>(po.heartbeat_timeout, *fence + cluster::kFenceMargin);
  }
  po.addresses = AddressRulesFor(layout, address);
  po.probe_reachability = static_cast<bool>(options.reach_probe);
  Result<std::unique_ptr<Fleet>> fleet = Fleet::Open(po, layout.dir + "/jobs", WallNow());
  if (!fleet.ok()) return fleet.status();

  AgentServiceImpl agents(fleet->get(), *token);
  ControlServiceImpl control(fleet->get(), *token);
  control.ha_status = options.ha_status;
  grpc::ServerBuilder builder;
  int bound = 0;
  Result<std::shared_ptr<grpc::ServerCredentials>> creds = cluster::ServerCredentials(layout);
  if (!creds.ok()) return creds.status();
  builder.AddListeningPort(address, *creds, &bound);
  // Agents ping every second to find a connection that a partition killed
  // silently (agent.cc, Channel): allow it rather than answer GOAWAY.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.RegisterService(&agents);
  builder.RegisterService(&control);
  agents.streams().AddQueues(&builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound == 0) {
    return Status::Unavailable("controller: cannot listen on " + address + " (in use?); stop what holds it "
                               "or run 'bulwark down' first");
  }
  agents.streams().Start();
  // A replay can take seconds: the agents' reconnect grace counts from now.
  (*fleet)->Serving(WallNow());
  // Asked for port 0 (`bulwark up`): the kernel picked one; agents and the
  // CLI read it from here, and a restarted controller binds it again.
  if (address.size() > 2 && address.compare(address.size() - 2, 2, ":0") == 0) {
    address = address.substr(0, address.size() - 1) + std::to_string(bound);
    BULWARK_RETURN_IF_ERROR(WriteFileAtomic(layout.controller_addr(), address + "\n"));
  }
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(layout.controller_pid(), std::to_string(::getpid()) + "\n"));
  ControllerLog().Info("serving on " + address +
                       (cluster::TlsEnabled(layout) ? " (mutual TLS: clients need the cluster's certificate)" : ""));
  ControllerLog().Info("policy: " + controller::DescribePolicy(controller::ChangedPolicy(po.policy)));
  std::unique_ptr<MetricsServer> metrics = ServeMetrics(layout, options.metrics_port, fleet->get(), &agents.latency());
  std::fflush(stderr);

  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  // Machines prove they can be reached before they join (issue 40): probed
  // off the tick's thread and without the plane's lock, since a firewall
  // that drops packets makes a probe wait out its timeout.
  std::thread prober;
  if (options.reach_probe) {
    prober = std::thread([&] {
      while (!g_stop) {
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
        for (const Plane::ReachProbe& p : (*fleet)->ProbesDue(WallNow())) {
          (*fleet)->ProbeDone(p, options.reach_probe(p.addr, *token), WallNow());
        }
      }
    });
  }
  // The liveness tick: heartbeat loss is the one fault no agent can report.
  // A controller that stops leading stops at once: no tick, no service.
  const auto leading = [&] { return !options.leading || options.leading(); };
  while (!g_stop && leading()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    if (leading()) (*fleet)->Tick(WallNow());
  }
  const bool deposed = !g_stop && !leading();
  g_stop = true;  // ends the prober
  if (prober.joinable()) prober.join();
  metrics.reset();
  agents.streams().StopAccepting();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(deposed ? 0 : 500));
  agents.streams().Stop();
  if (deposed) g_stop = false;  // the next term serves again
  return deposed ? Status::Unavailable("this controller no longer leads") : Status::OK();
}

}  // namespace bulwark::plane
