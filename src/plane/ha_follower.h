// What a controller that does not lead answers (`bulwark controller
// --etcd`). `status` says whom it follows and where that leader serves;
// every other call, an agent's or the CLI's, is refused UNAVAILABLE with the
// leader's address in the reply's trailing metadata (cluster/controllers.h),
// so the caller moves there instead of waiting on a controller that will
// not act.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "plane/etcd_client.h"

namespace grpc {
class Server;
}

namespace bulwark::plane {

// Tells etcd where controller `id` serves (<prefix>members/<id>), so its
// peers can point callers at it once it leads. Not fenced: an address is
// not an act, and a follower publishes its own before it ever leads.
Status PublishAddress(const EtcdClient& etcd, const std::string& prefix, const std::string& id,
                      const std::string& address);

// Who leads the prefix and where it serves, as etcd last said: a thread
// reads it every 250 ms, so a follower's answers never wait on etcd (cut
// off from it, a call would wait out the client's deadline).
class LeaderPointer {
 public:
  struct Leader {
    std::string id;       // "" when none leads
    std::string address;  // "" when it published none
  };
  LeaderPointer(std::shared_ptr<const EtcdClient> etcd, std::string prefix);
  ~LeaderPointer();
  // The last reading; Unavailable while etcd does not answer.
  Result<Leader> Get() const EXCLUDES(mu_);

 private:
  void Refresh();

  const std::shared_ptr<const EtcdClient> etcd_;
  const std::string prefix_;
  mutable Mutex mu_;
  Result<Leader> last_ GUARDED_BY(mu_) = Status::Unavailable("etcd not asked yet");
  std::atomic<bool> stop_{false};
  std::thread reader_;
};

// The follower's answers, served at a controller's address while this
// object lives: `status` is the follower's own status JSON, to which the
// leader's address is added.
class FollowerEndpoint {
 public:
  // Null when `address` cannot be bound (logged).
  static std::unique_ptr<FollowerEndpoint> Serve(const std::string& dir, const std::string& address,
                                                 std::function<nlohmann::json()> status, LeaderPointer* leader);
  // Stops serving at once: the address is free for the leader's own server.
  ~FollowerEndpoint();

 private:
  struct Services;
  FollowerEndpoint() = default;
  std::unique_ptr<Services> services_;  // outlives server_
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace bulwark::plane
