#include "plane/ha_controller.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

#include "common/log.h"
#include "plane/journal_etcd.h"
#include "plane/leader.h"

namespace bulwark::plane {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

std::string DefaultId() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(::getpid());
}

}  // namespace

Status RunHaController(ControllerOptions options, const HaOptions& ha) {
  const Logger log("controller");
  if (ha.lease_s < 2) {
    return Status::InvalidArgument("--etcd-lease " + std::to_string(ha.lease_s) +
                                   " is below etcd's shortest lease (2 s with its default timing); give 2 or more");
  }
  Result<std::unique_ptr<EtcdClient>> connected = EtcdClient::Connect(ha.endpoints, std::chrono::milliseconds(1000));
  if (!connected.ok()) return connected.status();
  std::shared_ptr<const EtcdClient> etcd = std::move(*connected);
  const std::string id = ha.id.empty() ? DefaultId() : ha.id;
  while (!g_stop) {
    std::signal(SIGTERM, OnSignal);
    std::signal(SIGINT, OnSignal);
    Result<std::unique_ptr<Leadership>> lead =
        Leadership::Campaign(*etcd, ha.prefix, id, ha.lease_s, g_stop, [&](const std::string& l) { log.Info(l); });
    if (!lead.ok()) break;  // stopped while following
    const Term term = (*lead)->term();
    const Leadership* held = lead->get();
    options.open_journal = [etcd, prefix = ha.prefix, term](bool create) -> Result<std::unique_ptr<JournalStore>> {
      Result<std::unique_ptr<EtcdJournal>> j = EtcdJournal::Open(etcd, prefix, term, create);
      if (!j.ok()) return j.status();
      return std::unique_ptr<JournalStore>(std::move(*j));
    };
    options.leading = [held] { return !held->lost(); };
    Status st = RunController(options);
    if (st.ok()) return st;  // SIGTERM: the lease is revoked as `lead` goes
    if (!held->lost()) return st;  // a real error, not the end of the term
    log.Warn("stopped acting: " + held->why_lost() + "; campaigning again");
  }
  return Status::OK();
}

}  // namespace bulwark::plane
