// The controller's HTTP endpoint for Prometheus: GET /metrics answers the
// text a callback renders (Plane::Metrics). Served by cpp-httplib (Debian's
// libcpp-httplib-dev, a compiled library) on a thread of its own, so a slow
// scraper never holds up the gRPC services or the liveness tick.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace bulwark::controller {

class MetricsServer {
 public:
  // Listens on host:port (port 0: any free port) and serves until
  // destroyed. Unavailable when the port cannot be bound.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port,
                                                      std::function<std::string()> render);
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

}  // namespace bulwark::controller
