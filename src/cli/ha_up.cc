#include "cli/ha_up.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "cluster/local/local_cluster.h"
#include "common/files.h"
#include "plane/etcd_client.h"
#include "plane/ha_controller.h"

namespace bulwark::cli {
namespace {

constexpr int kMembers = 3;
const char* const kControllers[] = {"c1", "c2"};

std::string EtcdDir(const cluster::Layout& l, int n) { return l.dir + "/etcd/" + std::to_string(n); }
std::string ControllerDir(const cluster::Layout& l, const std::string& id) { return l.dir + "/controllers/" + id; }

bool Poll(double seconds, const std::function<bool()>& ready) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (std::chrono::steady_clock::now() < until) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return ready();
}

std::string Quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Three fresh members; their endpoints. A member the plan names runs in its
// namespace at the standard ports of its own address (nothing else listens
// there); without one, all three share `host` at ports picked free.
Result<std::string> StartEtcd(const cluster::Layout& layout, const std::string& host,
                              const cluster::NetnsPlan* netns) {
  std::vector<std::string> clients, peers;
  std::string initial;
  auto ns_of = [&](int n) { return netns ? netns->Find(HaEtcdIds()[n]) : nullptr; };
  for (int n = 0; n < kMembers; ++n) {
    const cluster::NetnsMachine* m = ns_of(n);
    clients.push_back(m ? m->address + ":2379" : host + ":" + std::to_string(plane::FreeTcpPort()));
    peers.push_back(m ? "http://" + m->address + ":2380" : "http://127.0.0.1:" + std::to_string(plane::FreeTcpPort()));
    initial += (n ? "," : "") + HaEtcdIds()[n] + "=" + peers.back();
  }
  for (int n = 0; n < kMembers; ++n) {
    const std::string dir = EtcdDir(layout, n);
    std::error_code ec;
    std::filesystem::remove_all(dir + "/data", ec);  // a fresh cluster starts from nothing
    BULWARK_RETURN_IF_ERROR(MakeDirs(dir));
    // The shell writes the member's own pid, then becomes etcd. --pre-vote
    // (etcd 3.5's default, not 3.4's): a member back from a partition asks
    // before it campaigns, so it cannot depose a healthy raft leader, and
    // that election would give every lease its full TTL again, the
    // controller's included, delaying a failover by up to a lease.
    const std::string cmd =
        "echo $$ > " + Quoted(dir + "/etcd.pid") + "; exec etcd --name " + HaEtcdIds()[n] + " --data-dir " +
        Quoted(dir + "/data") + " --listen-client-urls http://" + clients[n] + " --advertise-client-urls http://" +
        clients[n] + " --listen-peer-urls " + peers[n] + " --initial-advertise-peer-urls " + peers[n] +
        " --initial-cluster " + initial + " --initial-cluster-state new --pre-vote --log-level error";
    std::vector<std::string> argv = {"/bin/sh", "-c", cmd};
    if (const cluster::NetnsMachine* m = ns_of(n)) argv = cluster::InNetns(*m, argv);
    BULWARK_RETURN_IF_ERROR(cluster::SpawnDetached(argv, dir + "/etcd.log"));
  }
  for (int n = 0; n < kMembers; ++n) {
    if (!Poll(20, [&] { return plane::EtcdClient::Connect(clients[n], std::chrono::milliseconds(500)).ok(); })) {
      return Status::Unavailable("etcd member " + std::to_string(n) + " did not answer within 20 s at " + clients[n] +
                                 "; see " + EtcdDir(layout, n) + "/etcd.log (is etcd-server installed? "
                                 "scripts/install-deps.sh)");
    }
  }
  std::string endpoints;
  for (const std::string& c : clients) endpoints += (endpoints.empty() ? "" : ",") + c;
  return endpoints;
}

}  // namespace

std::vector<std::string> HaControllerIds() { return {std::begin(kControllers), std::end(kControllers)}; }
std::vector<std::string> HaEtcdIds() { return {"e0", "e1", "e2"}; }

Result<ControlClient> StartHa(const Args& a, const cluster::Layout& layout, const std::string& self,
                              const std::string& listen, const cluster::NetnsPlan* netns) {
  if (a.Has("tls")) return Status::InvalidArgument("up: --ha with --tls is not supported yet; leave out one of them");
  // Without namespaces of their own the members listen on `listen` (with
  // namespaces, the host's end of the bridge, where every namespace
  // reaches them); with them, each at its own address on the bridge.
  Result<std::string> endpoints = StartEtcd(layout, netns ? listen : "127.0.0.1", netns);
  if (!endpoints.ok()) return endpoints.status();
  Result<std::string> token = ReadFile(layout.token());
  if (!token.ok()) return token.status();
  // One prefix per `up`: a controller of an earlier cluster cannot lead this one.
  const std::string prefix = "/bulwark/" + token->substr(0, 8) + "/";
  // Each controller's port is fixed before it starts, so a follower answers
  // there too (pointing at the leader), and agents and the CLI are given
  // them all (cluster/controllers.h): they find the leader themselves, and a
  // failover needs no file rewritten.
  std::string all;
  auto ns_of = [&](const std::string& id) { return netns ? netns->Find(id) : nullptr; };
  for (const char* id : kControllers) {
    const cluster::Layout own{ControllerDir(layout, id)};
    BULWARK_RETURN_IF_ERROR(MakeDirs(own.dir));
    const int port = plane::FreeTcpPort();
    if (port <= 0) return Status::Unavailable(std::string("up --ha: no free port for controller ") + id);
    const std::string host = ns_of(id) ? ns_of(id)->address : listen;
    BULWARK_RETURN_IF_ERROR(WriteFileAtomic(own.controller_addr(), host + ":" + std::to_string(port) + "\n"));
    all += host + ":" + std::to_string(port) + "\n";
  }
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(layout.controllers_addr(), all));
  for (const char* id : kControllers) {
    const cluster::Layout own{ControllerDir(layout, id)};
    BULWARK_RETURN_IF_ERROR(WriteFileAtomic(own.token(), *token));
    ::chmod(own.token().c_str(), 0600);
    // The agents' fence: the controller reads it from its own directory,
    // and must not count a silent machine lost before its ranks stopped.
    std::remove(own.fence_timeout().c_str());
    if (Result<std::string> fence = ReadFile(layout.fence_timeout()); fence.ok()) {
      BULWARK_RETURN_IF_ERROR(WriteFileAtomic(own.fence_timeout(), *fence));
    }
    std::remove(own.policy().c_str());  // ... and the policy `up --policy` wrote
    if (Result<std::string> policy = ReadFile(layout.policy()); policy.ok()) {
      BULWARK_RETURN_IF_ERROR(WriteFileAtomic(own.policy(), *policy));
    }
    std::remove(own.controller_pid().c_str());
    std::vector<std::string> argv = {self,          "controller", "--init",        "--dir",       own.dir,
                                     "--etcd",      *endpoints,   "--etcd-prefix", prefix,        "--controller-id",
                                     id,            "--cluster-dir", layout.dir};
    for (const char* f : {"ladder-rungs", "ladder-tests", "ladder-budget", "failure-rate", "ladder-align-every"}) {
      if (a.Has(f)) argv.insert(argv.end(), {std::string("--") + f, a.Get(f)});
    }
    if (const cluster::NetnsMachine* m = ns_of(id)) argv = cluster::InNetns(*m, argv);
    BULWARK_RETURN_IF_ERROR(cluster::SpawnDetached(argv, own.controller_log()));
    if (id != kControllers[0]) break;
    // The first leads: it publishes its address, then answers.
    auto leads = [&] {
      Result<ControlClient> c = ControlClient::Connect(own.dir);  // c1 alone: c2 is not up yet
      Result<nlohmann::json> s = c.ok() ? c->Status() : Result<nlohmann::json>(c.status());
      return s.ok() && s->value("leader", nlohmann::json()) == id;
    };
    if (!Poll(20, leads)) {
      return Status::Unavailable(std::string("controller ") + id + " did not lead within 20 s; see " +
                                 own.controller_log());
    }
  }
  return ControlClient::Connect(layout.dir);
}

std::vector<pid_t> HaControllerPids(const cluster::Layout& layout) {
  std::vector<pid_t> out;
  for (const std::string& id : ListDir(layout.dir + "/controllers")) {
    if (Result<pid_t> p = cluster::LivePid(cluster::Layout{ControllerDir(layout, id)}.controller_pid()); p.ok()) {
      out.push_back(*p);
    }
  }
  return out;
}

std::vector<pid_t> HaEtcdPids(const cluster::Layout& layout) {
  std::vector<pid_t> out;
  for (const std::string& n : ListDir(layout.dir + "/etcd")) {
    if (Result<pid_t> p = cluster::LivePid(layout.dir + "/etcd/" + n + "/etcd.pid"); p.ok()) out.push_back(*p);
  }
  return out;
}

}  // namespace bulwark::cli
