#include "common/metrics_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

namespace bulwark {

struct MetricsServer::Impl {
  httplib::Server http;
  std::thread thread;
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host, int port,
                                                           std::function<std::string()> render,
                                                           const std::string& who) {
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  s->impl_ = std::make_unique<Impl>();
  s->host_ = host;
  httplib::Server& http = s->impl_->http;
  // One worker: scrapes come every few seconds, and each takes the plane's
  // lock; more threads would only queue on it.
  http.new_task_queue = [] { return new httplib::ThreadPool(1); };
  // SO_REUSEADDR only: a restarted controller or agent may take its
  // recorded port back from TIME_WAIT, but httplib's default also sets
  // SO_REUSEPORT, which would let a second process bind the same port and
  // answer half the scrapes.
  http.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http.Get("/metrics", [render](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/", [who](const httplib::Request&, httplib::Response& res) {
    res.set_content(who + ": metrics at /metrics\n", "text/plain");
  });
  const int bound = port == 0 ? http.bind_to_any_port(host) : (http.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return Status::Unavailable("metrics: cannot listen on " + host + ":" + std::to_string(port) +
                               " (in use?); pick another with --metrics-port");
  }
  s->port_ = bound;
  s->impl_->thread = std::thread([p = s->impl_.get()] { p->http.listen_after_bind(); });
  return s;
}

MetricsServer::~MetricsServer() {
  if (!impl_ || !impl_->thread.joinable()) return;  // never listened: nothing to stop
  // stop() does nothing before the listening thread has started its loop,
  // and the join would then wait forever: let it start first.
  for (int i = 0; i < 200 && !impl_->http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string MetricsServer::url() const { return "http://" + host_ + ":" + std::to_string(port_) + "/metrics"; }

}  // namespace bulwark
