#include "control_client/control_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "cluster/controllers.h"
#include "cluster/layout.h"
#include "cluster/tls.h"
#include "common/files.h"
#include "common/token.h"

namespace bulwark::control_client {
namespace {

constexpr auto kDeadline = std::chrono::seconds(5);
// How long a write waits for its connection ("tcp handshaker shutdown" under
// the suite's load failed a test's `bulwark inject` while the controller
// served every status query around it).
constexpr auto kConnectWait = std::chrono::seconds(3);

bulwark::Status FromGrpc(const grpc::Status& s, const std::string& what, const std::string& addr) {
  if (s.ok()) return bulwark::Status::OK();
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return bulwark::Status::Unavailable(what + ": controller at " + addr + " does not answer (" +
                                          s.error_message() + "); is the cluster up? ('bulwark up')");
    case grpc::StatusCode::INVALID_ARGUMENT:
      return bulwark::Status::InvalidArgument(what + ": " + s.error_message());
    case grpc::StatusCode::NOT_FOUND:
      return bulwark::Status::NotFound(what + ": " + s.error_message());
    default:
      return bulwark::Status::FailedPrecondition(what + ": " + s.error_message());
  }
}

Result<nlohmann::json> ParseReply(const wire::JsonReply& r) {
  nlohmann::json j = nlohmann::json::parse(r.json(), nullptr, false);
  if (j.is_discarded()) return bulwark::Status::Internal("controller sent a report that is not JSON");
  return j;
}

}  // namespace

Result<ControlClient> ControlClient::Connect(const std::string& dir) {
  const cluster::Layout layout{dir};
  const std::vector<std::string> list = cluster::ControllerAddresses(layout, "");
  if (list.empty()) {
    return bulwark::Status::NotFound("no cluster in " + dir + " (" + layout.controller_addr() +
                                     " is missing); start one with 'bulwark up --dir " + dir + "'");
  }
  if (list.size() == 1) return Open(layout, list.front());
  // Several controllers (up --ha): ask each in turn, going where a follower
  // points, until one leads. A dead address costs its retries (about 1 s).
  std::string at = list.front();
  for (size_t hop = 0; hop < 2 * list.size(); ++hop) {
    Result<ControlClient> c = Open(layout, at);
    if (!c.ok()) return c.status();
    Result<nlohmann::json> s = c->Status();
    const bool follows = s.ok() && s->contains("ha") && (*s)["ha"].is_object() &&
                         (*s)["ha"].value("role", "") == "follower";
    if (s.ok() && !follows) return c;
    const std::string hint = follows && (*s)["leader_address"].is_string() ? (*s)["leader_address"].get<std::string>() : "";
    at = cluster::NextController(list, at, hint);
  }
  // None leads now: calls go to the first, whose answer says why.
  return Open(layout, list.front());
}

Result<ControlClient> ControlClient::Open(const cluster::Layout& layout, const std::string& address) {
  ControlClient c;
  c.address_ = address;
  Result<std::string> token = ReadToken(layout.token());
  if (token.ok()) c.token_ = *token;
  // Short reconnect backoff: `up` polls a controller that is still starting,
  // and gRPC's default backoff would add a second or more to every wait.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  // A fleet's status is larger than gRPC's default 4 MiB limit on what a
  // client receives: about 5 MiB at 12,500 machines (issue 36).
  args.SetMaxReceiveMessageSize(-1);
  // A call fails at once when its connection attempt does ("tcp handshaker
  // shutdown" was seen under the test suite's load, with the controller
  // serving). The reads, and returning a machine, are safe to send again:
  // gRPC retries them on UNAVAILABLE for about a second. Submit, inject,
  // update and rollback are not retried: they must not happen twice.
  args.SetServiceConfigJSON(R"({"methodConfig": [{
    "name": [{"service": "bulwark.wire.ControlService", "method": "Status"},
             {"service": "bulwark.wire.ControlService", "method": "Incidents"},
             {"service": "bulwark.wire.ControlService", "method": "Ledger"},
             {"service": "bulwark.wire.ControlService", "method": "Releases"},
             {"service": "bulwark.wire.ControlService", "method": "ReturnMachine"}],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "0.4s",
                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})");
  Result<std::shared_ptr<grpc::ChannelCredentials>> creds = cluster::ChannelCredentials(layout);
  if (!creds.ok()) return creds.status();
  c.channel_ = grpc::CreateCustomChannel(c.address_, *creds, args);
  c.rpc_ = wire::ControlService::NewStub(c.channel_);
  return c;
}

void ControlClient::Prepare(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + kDeadline);
  if (!token_.empty()) ctx->AddMetadata(kTokenMetadataKey, token_);
}

void ControlClient::PrepareWrite(grpc::ClientContext* ctx) const {
  // Not connected after this, the call fails at once as before ("does not
  // answer; is the cluster up?"), having been sent nowhere.
  channel_->WaitForConnected(std::chrono::system_clock::now() + kConnectWait);
  Prepare(ctx);
}

Result<std::string> ControlClient::Submit(const wire::SubmitRequest& req) {
  grpc::ClientContext ctx;
  PrepareWrite(&ctx);
  wire::SubmitReply reply;
  BULWARK_RETURN_IF_ERROR(FromGrpc(rpc_->Submit(&ctx, req, &reply), "submit", address_));
  return reply.job();
}

Result<nlohmann::json> ControlClient::Query(QueryRpc rpc, const char* what) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  wire::JsonReply r;
  wire::QueryRequest q;
  q.set_job(job_);
  BULWARK_RETURN_IF_ERROR(FromGrpc(((*rpc_).*rpc)(&ctx, q, &r), what, address_));
  return ParseReply(r);
}

Result<nlohmann::json> ControlClient::Status() { return Query(&wire::ControlService::Stub::Status, "status"); }

Result<nlohmann::json> ControlClient::Incidents() { return Query(&wire::ControlService::Stub::Incidents, "incidents"); }

Result<nlohmann::json> ControlClient::Ledger() { return Query(&wire::ControlService::Stub::Ledger, "ledger"); }

bulwark::Status ControlClient::Inject(const std::string& machine, const std::string& fault, int rank,
                                      const std::string& where, double factor) {
  grpc::ClientContext ctx;
  PrepareWrite(&ctx);
  wire::InjectRequest req;
  req.set_machine(machine);
  req.set_fault(fault);
  req.set_rank(rank);
  req.set_where(where);
  req.set_factor(factor);
  wire::InjectReply reply;
  return FromGrpc(rpc_->Inject(&ctx, req, &reply), "inject", address_);
}

bulwark::Result<std::string> ControlClient::ReturnMachine(const std::string& machine) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  wire::ReturnMachineRequest req;
  req.set_machine(machine);
  wire::ReturnMachineReply reply;
  BULWARK_RETURN_IF_ERROR(FromGrpc(rpc_->ReturnMachine(&ctx, req, &reply), "machine return", address_));
  return reply.note();
}

Result<int> ControlClient::Update(const wire::UpdateRequest& req) {
  grpc::ClientContext ctx;
  PrepareWrite(&ctx);
  wire::UpdateReply reply;
  BULWARK_RETURN_IF_ERROR(FromGrpc(rpc_->Update(&ctx, req, &reply), "update", address_));
  return reply.release();
}

bulwark::Status ControlClient::Rollback(int to, const std::string& why) {
  grpc::ClientContext ctx;
  PrepareWrite(&ctx);
  wire::RollbackRequest req;
  req.set_job(job_);
  req.set_to(to);
  req.set_why(why);
  wire::RollbackReply reply;
  return FromGrpc(rpc_->Rollback(&ctx, req, &reply), "rollback", address_);
}

Result<nlohmann::json> ControlClient::Releases() {
  return Query(&wire::ControlService::Stub::Releases, "releases");
}

}  // namespace bulwark::control_client
