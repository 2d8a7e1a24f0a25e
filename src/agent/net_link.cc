#include "agent/net_link.h"

#include <cstdlib>

#include "common/files.h"

namespace bulwark::agent {
namespace {

// A counter that cannot be read (a driver without it) stays 0.
uint64_t Counter(const std::string& path) {
  const std::string v = ReadFirstLine(path);
  return v.empty() ? 0 : std::strtoull(v.c_str(), nullptr, 10);
}

}  // namespace

Result<LinkReading> ReadLink(const std::string& sysfs_net, const std::string& iface) {
  const std::string dir = sysfs_net + "/" + iface;
  if (!PathExists(dir + "/operstate")) {
    return Status::NotFound("network interface '" + iface + "' not found under " + sysfs_net +
                            " (`ip link` lists this machine's; give one to `bulwark agent --nic`)");
  }
  LinkReading r;
  r.iface = iface;
  r.operstate = ReadFirstLine(dir + "/operstate");
  // Reading carrier of an interface that is administratively down fails
  // (EINVAL): no carrier.
  r.carrier = ReadFirstLine(dir + "/carrier") == "1";
  r.carrier_changes = Counter(dir + "/carrier_changes");
  r.rx_errors = Counter(dir + "/statistics/rx_errors");
  r.tx_errors = Counter(dir + "/statistics/tx_errors");
  r.rx_dropped = Counter(dir + "/statistics/rx_dropped");
  r.tx_dropped = Counter(dir + "/statistics/tx_dropped");
  return r;
}

bool LinkUp(const LinkReading& r) { return (r.operstate == "up" || r.operstate == "unknown") && r.carrier; }

std::string DescribeLink(const LinkReading& r) {
  return r.iface + (LinkUp(r) ? " up" : " down") + " (operstate " + r.operstate + (r.carrier ? "" : ", no carrier") +
         ", " + std::to_string(r.carrier_changes) + " carrier changes)";
}

uint64_t FlapsBetween(const LinkReading& before, const LinkReading& now) {
  return now.carrier_changes > before.carrier_changes ? now.carrier_changes - before.carrier_changes : 0;
}

}  // namespace bulwark::agent
