#include "plane/ha_controller.h"

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <set>
#include <nlohmann/json.hpp>

#include "bulwark.grpc.pb.h"
#include "cluster/layout.h"
#include "cluster/tls.h"
#include "common/files.h"
#include "common/log.h"
#include "common/mutex.h"
#include "plane/ha_follower.h"
#include "plane/job_journals.h"
#include "plane/journal_etcd.h"
#include "plane/journal_etcd_mirror.h"
#include "plane/leader.h"

namespace bulwark::plane {
namespace {

using nlohmann::json;

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

std::string DefaultId() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(::getpid());
}

// This controller's address, made concrete: a port of 0 becomes one the
// kernel picks now, written back, so it can be published before serving.
Result<std::string> OwnAddress(const std::string& dir) {
  const cluster::Layout layout{dir};
  Result<std::string> addr = ReadFile(layout.controller_addr());
  if (!addr.ok()) return addr.status().Annotate("controller address (written by 'bulwark up')");
  std::string a = *addr;
  while (!a.empty() && (a.back() == '\n' || a.back() == ' ')) a.pop_back();
  if (a.size() < 2 || a.compare(a.size() - 2, 2, ":0") != 0) return a;
  // The controller binds it within milliseconds.
  const int port = FreeTcpPort();
  if (port <= 0) return Status::Unavailable("controller: no free port for " + a);
  a = a.substr(0, a.size() - 1) + std::to_string(port);
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(layout.controller_addr(), a + "\n"));
  return a;
}

}  // namespace

namespace {
int BindAndReleasePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  socklen_t len = sizeof any;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&any), &len) == 0) {
    port = ntohs(any.sin_port);
  }
  ::close(fd);
  return port;
}
}  // namespace

int FreeTcpPort() {
  // Released, a port may be the kernel's next answer too: two of a test's
  // three etcd members were once given the same client port, so the cluster
  // ran on two, and losing one more lost its quorum. A port is handed out
  // once per process.
  static Mutex mu;
  static std::set<int>* given PT_GUARDED_BY(mu) = new std::set<int>();
  MutexLock lock(&mu);
  for (int tries = 0; tries < 64; ++tries) {
    const int port = BindAndReleasePort();
    if (port < 0) return -1;
    if (given->insert(port).second) return port;
  }
  return -1;
}

Status RunHaController(ControllerOptions options, const HaOptions& ha) {
  const Logger log("controller");
  if (ha.lease_s < 2) {
    return Status::InvalidArgument("--etcd-lease " + std::to_string(ha.lease_s) +
                                   " is below etcd's shortest lease (2 s with its default timing); give 2 or more");
  }
  Result<std::unique_ptr<EtcdClient>> connected = EtcdClient::Connect(ha.endpoints, std::chrono::milliseconds(1000));
  if (!connected.ok()) return connected.status();
  // Who leads is read through a client that does not retry (LeaderPointer): an
  // operator must hear "etcd unreachable" within a second, not a lease.
  Result<std::unique_ptr<EtcdClient>> asker = EtcdClient::Connect(ha.endpoints, std::chrono::milliseconds(1000));
  if (!asker.ok()) return asker.status();
  std::shared_ptr<const EtcdClient> ask = std::move(*asker);
  // A member lost, or etcd electing a new raft leader, must not fail a
  // journal write: retry within the term (the fence refuses a deposed one).
  (*connected)->set_retry_for(std::chrono::milliseconds(ha.lease_s * 1000));
  std::shared_ptr<const EtcdClient> etcd = std::move(*connected);
  const std::string id = ha.id.empty() ? DefaultId() : ha.id;
  // Known before it leads, so a follower answers there (pointing at the
  // leader) and its peers can point callers here once it leads.
  Result<std::string> own = OwnAddress(options.dir);
  if (!own.ok()) return own.status();
  if (Status st = PublishAddress(*etcd, ha.prefix, id, *own); !st.ok()) {
    log.Warn(st.message() + ": followers cannot point callers here");
  }
  LeaderPointer pointer(ask, ha.prefix);
  // A standby keeps the journal in memory as it is written: taking over
  // then reads nothing from etcd (journal_etcd_mirror.h).
  std::shared_ptr<const EtcdMirror> mirror;
  if (Result<std::unique_ptr<EtcdMirror>> m = EtcdMirror::Start(etcd, ha.prefix); m.ok()) {
    mirror = std::move(*m);
  } else {
    log.Warn(m.status().message() + ": a takeover reads the journal from etcd");
  }
  // A follower is a controller too: `bulwark down` and operators find it by
  // its pid file before it ever leads (RunController writes it again).
  BULWARK_RETURN_IF_ERROR(
      WriteFileAtomic(cluster::Layout{options.dir}.controller_pid(), std::to_string(::getpid()) + "\n"));
  // A write etcd never answered outlives its term here, until etcd says
  // what it did with it (journal_etcd.h).
  auto unsettled = std::make_shared<UnsettledWrites>();
  Mutex mu;
  std::string last_word;  // the campaign's last log line
  json settled = json::array();  // what etcd did with this controller's unanswered writes, newest last
  auto follower_status = [&] {
    Result<LeaderPointer::Leader> held = pointer.Get();
    MutexLock lock(&mu);
    return json{{"error", "controller " + id + " does not lead: " + last_word},
                {"leader", held.ok() ? json(held->id) : json()},
                {"ha",
                 {{"role", "follower"}, {"id", id}, {"etcd", ha.endpoints}, {"why", last_word}, {"settled", settled}}},
                {"job", nullptr},
                {"machines", json::array()}};
  };
  while (!g_stop) {
    std::signal(SIGTERM, OnSignal);
    std::signal(SIGINT, OnSignal);
    std::unique_ptr<FollowerEndpoint> follower = FollowerEndpoint::Serve(options.dir, *own, follower_status, &pointer);
    // Before campaigning, which needs etcd as much: a deposed term's last
    // write is refused here, by etcd, not only left unsent.
    for (const UnsettledWrites::Outcome& o : unsettled->Settle(*etcd, g_stop)) {
      log.Warn(o.detail);
      MutexLock lock(&mu);
      settled.push_back({{"write", o.what}, {"term", o.term}, {"refused", o.refused}, {"detail", o.detail}});
    }
    Result<std::unique_ptr<Leadership>> lead =
        Leadership::Campaign(*etcd, ha.prefix, id, ha.lease_s, g_stop, [&](const std::string& l) {
          log.Info(l);
          MutexLock lock(&mu);
          last_word = l;
        });
    follower.reset();
    if (!lead.ok()) break;  // stopped while following
    if (!ha.cluster_dir.empty()) {
      BULWARK_RETURN_IF_ERROR(WriteFileAtomic(cluster::Layout{ha.cluster_dir}.controller_addr(), *own + "\n"));
      log.Info("published " + *own + " to " + cluster::Layout{ha.cluster_dir}.controller_addr());
    }
    const Term term = (*lead)->term();
    const Leadership* held = lead->get();
    options.open_journal = [etcd, prefix = ha.prefix, term, mirror,
                            unsettled](bool create) -> Result<std::unique_ptr<JournalStore>> {
      Result<std::unique_ptr<EtcdJournal>> j = EtcdJournal::Open(etcd, prefix, term, create, mirror, unsettled);
      if (!j.ok()) return j.status();
      return std::unique_ptr<JournalStore>(std::move(*j));
    };
    options.job_journals = EtcdJobJournals(etcd, ha.prefix, term, unsettled);
    options.leading = [held] { return !held->lost(); };
    options.ha_status = [id, term, endpoints = ha.endpoints] {
      return json{{"leader", id}, {"ha", {{"role", "leader"}, {"id", id}, {"term", term.revision}, {"etcd", endpoints}}}}
          .dump();
    };
    Status st = RunController(options);
    if (st.ok()) return st;  // SIGTERM: the lease is revoked as `lead` goes
    if (!held->lost()) return st;  // a real error, not the end of the term
    log.Warn("stopped acting: " + held->why_lost() + "; campaigning again");
    MutexLock lock(&mu);
    last_word = "its term ended: " + held->why_lost();
  }
  return Status::OK();
}

}  // namespace bulwark::plane
