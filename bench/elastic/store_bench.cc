// bench/elastic/store: what one rendezvous-store operation costs as the
// store holds more clients. The ring's regroup (trainer/comm/ring.h) makes each
// survivor four operations on one TCPStore, rank 0's; libtorch 1.13's store
// daemon serves every client from one thread, so what an operation costs
// at 12,500 replicas depends on how it grows with the connected clients.
// For each N, N idle clients connect, then one client times 2,000
// set + get pairs. Figures only.
//
// Usage: bulwark-store-bench [N ...]   (default 0 100 1000 2000; each client
// holds two of this process's descriptors)
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static c10d::TCPStoreOptions Options(uint16_t port, bool server) {
  c10d::TCPStoreOptions o;
  o.port = port;  // 0: the kernel picks the server's
  o.isServer = server;
  o.waitWorkers = false;
  o.timeout = std::chrono::seconds(60);
  return o;
}

int main(int argc, char** argv) {
  std::vector<int> ns;
  for (int i = 1; i < argc; ++i) ns.push_back(std::atoi(argv[i]));
  if (ns.empty()) ns = {0, 100, 1000, 2000};
  std::printf("%8s %22s %18s\n", "clients", "set+get pair (median)", "per operation");
  for (int n : ns) {
    auto server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", Options(0, /*server=*/true));
    const c10d::TCPStoreOptions co = Options(server->getPort(), /*server=*/false);
    std::vector<c10::intrusive_ptr<c10d::TCPStore>> idle;
    for (int i = 0; i < n; ++i) idle.push_back(c10::make_intrusive<c10d::TCPStore>("127.0.0.1", co));
    auto client = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", co);
    std::vector<double> us;
    const std::vector<uint8_t> value(24, 'x');  // an "addr:port" identity
    for (int i = 0; i < 2000; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      client->set("k" + std::to_string(i), value);
      client->get("k" + std::to_string(i));
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
    std::printf("%8d %19.1f us %15.1f us\n", n, us[us.size() / 2], us[us.size() / 2] / 2);
    std::fflush(stdout);
  }
  return 0;
}
