// CommandStreams: every agent's command stream (the Commands call), served
// on gRPC's asynchronous API from completion queues of its own.
//
// Why not the callback API, like the agents' other calls: there, every open
// call of the server shares one completion queue, and Debian's gRPC is built
// without NDEBUG, so each completion on it searches a list of every
// operation outstanding on that queue (cq_check_tag). An open command
// stream always has one (the wait for its end), so at 12,500 agents every
// report's completions searched about 12,500 entries: 15% of the
// controller's CPU (issue 36's profile, docs/control-plane.md). Here the
// streams' operations sit on queues that see only the streams' own rare
// completions, and the reports' queue holds only reports in flight.
//
// The wire is unchanged: the same call, the same messages in the same order,
// ABORTED for a superseded stream.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bulwark.grpc.pb.h"
#include "common/mutex.h"
#include "plane/fleet.h"
#include "plane/workers.h"

namespace bulwark::plane {

class CommandStreams {
 public:
  using Service = wire::AgentService::WithAsyncMethod_Commands<wire::AgentService::Service>;

  CommandStreams(Service* service, Fleet* fleet, std::string token);
  ~CommandStreams();  // Stop(), if not yet
  CommandStreams(const CommandStreams&) = delete;
  CommandStreams& operator=(const CommandStreams&) = delete;

  // Before the server is built: the queues.
  void AddQueues(grpc::ServerBuilder* builder);
  // Once it is started: waits for calls, and polls the queues.
  void Start();
  // Before the server's Shutdown: asks for no new call. The server's
  // Shutdown then ends every stream, while the queues are still polled.
  void StopAccepting() EXCLUDES(mu_);
  // After the server's Shutdown: ends the queues and their threads.
  void Stop();

  // Calls begun or asked for, and not yet over (tests).
  int open() const { return live_; }

  class Stream;  // one call (command_streams.cc)

 private:
  friend class Stream;
  // A new Stream waiting for the next call on `queue`, unless StopAccepting.
  void Await(grpc::ServerCompletionQueue* queue) EXCLUDES(mu_);

  Service* const service_;
  Fleet* const fleet_;
  const std::string token_;
  Mutex mu_;
  bool accepting_ GUARDED_BY(mu_) = true;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> pollers_;
  bool stopped_ = false;
  std::atomic<int> live_{0};  // calls begun and not yet deleted
  // Every stream's reactions that need the plane run here, in order: one
  // thread, so a stream's state needs no lock of its own.
  Workers serial_{1};
};

}  // namespace bulwark::plane
