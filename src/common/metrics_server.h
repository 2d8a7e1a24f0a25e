// The HTTP endpoint for Prometheus of the controller and of each agent: GET
// /metrics answers the text a callback renders (Plane::Metrics,
// agent/agent_metrics.h). Served by cpp-httplib (Debian's libcpp-httplib-dev,
// a compiled library) on a thread of its own, so a slow scraper never holds
// up the gRPC services, the liveness tick or the agent's loop.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace bulwark {

class MetricsServer {
 public:
  // Listens on host:port (port 0: any free port) and serves until
  // destroyed. Unavailable when the port cannot be bound. `who` names the
  // process on the index page ("bulwark controller", "bulwark agent m01").
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port,
                                                      std::function<std::string()> render,
                                                      const std::string& who = "bulwark controller");
  ~MetricsServer();

  int port() const { return port_; }
  // "http://host:port/metrics"
  std::string url() const;

 private:
  struct Impl;
  MetricsServer() = default;
  std::unique_ptr<Impl> impl_;
  std::string host_;
  int port_ = 0;
};

}  // namespace bulwark
