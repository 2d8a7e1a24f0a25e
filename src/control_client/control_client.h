// A connection to the controller for whatever drives a cluster from
// outside (the CLI, the demo and benches): every call with a deadline and
// the cluster token.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bulwark.grpc.pb.h"
#include "cluster/layout.h"
#include "common/status.h"

namespace bulwark::control_client {

class ControlClient {
 public:
  // Reads DIR/token (the token only matters to mutating calls; reads work
  // without it) and the controllers' addresses (cluster/controllers.h):
  // with several, connects to the one that leads, following a follower's
  // pointer to it and skipping one that does not answer.
  static Result<ControlClient> Connect(const std::string& dir);

  Result<std::string> Submit(const wire::SubmitRequest& req);
  Result<nlohmann::json> Status();
  Result<nlohmann::json> Incidents();
  Result<nlohmann::json> Ledger();
  bulwark::Status Inject(const std::string& machine, const std::string& fault, int rank,
                         const std::string& where = "", double factor = 0);
  // The controller's note for the operator ("" when there is nothing to add).
  bulwark::Result<std::string> ReturnMachine(const std::string& machine);
  // The release number the controller gave it.
  Result<int> Update(const wire::UpdateRequest& req);
  bulwark::Status Rollback(int to, const std::string& why);
  Result<nlohmann::json> Releases();
  const std::string& address() const { return address_; }
  // Which job of the fleet the queries and Rollback are about ("" the first;
  // plane/fleet.h). Update names its job in its request.
  void set_job(std::string job) { job_ = std::move(job); }

 private:
  using QueryRpc = grpc::Status (wire::ControlService::Stub::*)(grpc::ClientContext*, const wire::QueryRequest&,
                                                                 wire::JsonReply*);
  // The read-only queries: one call, a JSON reply.
  Result<nlohmann::json> Query(QueryRpc rpc, const char* what);
  static Result<ControlClient> Open(const cluster::Layout& layout, const std::string& address);
  void Prepare(grpc::ClientContext* ctx) const;
  // Prepare for a call that must not happen twice (submit, inject, update,
  // rollback): first waits up to a few seconds for the channel to connect,
  // so that one failed connection attempt under load does not fail the
  // call; the call itself is sent once.
  void PrepareWrite(grpc::ClientContext* ctx) const;
  std::string address_;
  std::string job_;
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<wire::ControlService::Stub> rpc_;
};

}  // namespace bulwark::control_client
