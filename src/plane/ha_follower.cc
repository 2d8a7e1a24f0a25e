#include "plane/ha_follower.h"

#include <grpcpp/grpcpp.h>

#include "bulwark.grpc.pb.h"
#include "cluster/controllers.h"
#include "cluster/layout.h"
#include "cluster/tls.h"
#include "common/log.h"
#include "etcd/rpc.pb.h"

namespace bulwark::plane {
namespace {

using nlohmann::json;
namespace pb = etcdserverpb;

// The refusal of every call but status: UNAVAILABLE (the caller's own
// answer to "no controller here"), naming the leader, its address in the
// trailing metadata when known.
grpc::Status Refuse(grpc::ServerContext* ctx, LeaderPointer* pointer) {
  Result<LeaderPointer::Leader> l = pointer->Get();
  if (!l.ok()) return {grpc::StatusCode::UNAVAILABLE, "this controller does not lead, and etcd does not say who does"};
  if (l->id.empty()) return {grpc::StatusCode::UNAVAILABLE, "this controller does not lead, and none does yet"};
  if (!l->address.empty()) ctx->AddTrailingMetadata(cluster::kLeaderMetadataKey, l->address);
  return {grpc::StatusCode::UNAVAILABLE, "this controller does not lead; " + l->id + " does" +
                                             (l->address.empty() ? "" : " at " + l->address)};
}

class FollowerAgents final : public wire::AgentService::Service {
 public:
  explicit FollowerAgents(LeaderPointer* leader) : leader_(leader) {}
  grpc::Status Register(grpc::ServerContext* c, const wire::RegisterRequest*, wire::RegisterReply*) override {
    return Refuse(c, leader_);
  }
  grpc::Status Commands(grpc::ServerContext* c, const wire::CommandStreamRequest*,
                        grpc::ServerWriter<wire::Command>*) override {
    return Refuse(c, leader_);
  }
  grpc::Status Report(grpc::ServerContext* c, const wire::ReportRequest*, wire::ReportReply*) override {
    return Refuse(c, leader_);
  }
  grpc::Status UploadStacks(grpc::ServerContext* c, const wire::StacksRequest*, wire::StacksReply*) override {
    return Refuse(c, leader_);
  }

 private:
  LeaderPointer* leader_;
};

class FollowerControl final : public wire::ControlService::Service {
 public:
  FollowerControl(std::function<json()> status, LeaderPointer* leader) : status_(std::move(status)), leader_(leader) {}
  grpc::Status Status(grpc::ServerContext*, const wire::QueryRequest*, wire::JsonReply* r) override {
    json s = status_();
    Result<LeaderPointer::Leader> l = leader_->Get();
    s["leader_address"] = l.ok() && !l->address.empty() ? json(l->address) : json();
    r->set_json(s.dump());
    return grpc::Status::OK;
  }
  using S = grpc::ServerContext;
  grpc::Status Submit(S* c, const wire::SubmitRequest*, wire::SubmitReply*) override { return Refuse(c, leader_); }
  grpc::Status Incidents(S* c, const wire::QueryRequest*, wire::JsonReply*) override { return Refuse(c, leader_); }
  grpc::Status Ledger(S* c, const wire::QueryRequest*, wire::JsonReply*) override { return Refuse(c, leader_); }
  grpc::Status Inject(S* c, const wire::InjectRequest*, wire::InjectReply*) override { return Refuse(c, leader_); }
  grpc::Status ReturnMachine(S* c, const wire::ReturnMachineRequest*, wire::ReturnMachineReply*) override {
    return Refuse(c, leader_);
  }
  grpc::Status Update(S* c, const wire::UpdateRequest*, wire::UpdateReply*) override { return Refuse(c, leader_); }
  grpc::Status Rollback(S* c, const wire::RollbackRequest*, wire::RollbackReply*) override {
    return Refuse(c, leader_);
  }
  grpc::Status Releases(S* c, const wire::QueryRequest*, wire::JsonReply*) override { return Refuse(c, leader_); }

 private:
  std::function<json()> status_;
  LeaderPointer* leader_;
};

}  // namespace

Status PublishAddress(const EtcdClient& etcd, const std::string& prefix, const std::string& id,
                      const std::string& address) {
  pb::TxnRequest txn;
  pb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(prefix + "members/" + id);
  put->set_value(address);
  pb::TxnResponse resp;
  return etcd.Txn(txn, &resp).Annotate("publishing " + id + "'s address");
}

LeaderPointer::LeaderPointer(std::shared_ptr<const EtcdClient> etcd, std::string prefix)
    : etcd_(std::move(etcd)), prefix_(std::move(prefix)) {
  reader_ = std::thread([this] {
    while (!stop_) {
      Refresh();
      for (int i = 0; i < 5 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
}

LeaderPointer::~LeaderPointer() {
  stop_ = true;
  reader_.join();
}

void LeaderPointer::Refresh() {
  Leader l;
  Result<std::vector<EtcdKv>> held = etcd_->Range(prefix_ + "leader");
  if (held.ok() && !held->empty()) {
    l.id = (*held)[0].value;
    Result<std::vector<EtcdKv>> at = etcd_->Range(prefix_ + "members/" + l.id);
    if (at.ok() && !at->empty()) l.address = (*at)[0].value;
  }
  MutexLock lock(&mu_);
  last_ = held.ok() ? Result<Leader>(l) : Result<Leader>(held.status());
}

Result<LeaderPointer::Leader> LeaderPointer::Get() const {
  MutexLock lock(&mu_);
  return last_;
}

struct FollowerEndpoint::Services {
  Services(std::function<json()> status, LeaderPointer* leader) : agents(leader), control(std::move(status), leader) {}
  FollowerAgents agents;
  FollowerControl control;
};

std::unique_ptr<FollowerEndpoint> FollowerEndpoint::Serve(const std::string& dir, const std::string& address,
                                                          std::function<json()> status, LeaderPointer* leader) {
  Result<std::shared_ptr<grpc::ServerCredentials>> creds = cluster::ServerCredentials(cluster::Layout{dir});
  if (!creds.ok()) return nullptr;
  std::unique_ptr<FollowerEndpoint> e(new FollowerEndpoint);
  e->services_ = std::make_unique<Services>(std::move(status), leader);
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(address, *creds, &bound);
  builder.RegisterService(&e->services_->agents);
  builder.RegisterService(&e->services_->control);
  e->server_ = builder.BuildAndStart();
  if (!e->server_ || bound == 0) {
    Logger("controller").Warn("cannot serve the follower's answers on " + address);
    return nullptr;
  }
  return e;
}

FollowerEndpoint::~FollowerEndpoint() {
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
}

}  // namespace bulwark::plane
