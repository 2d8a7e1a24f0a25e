// The kernel's view of one network interface, read from sysfs
// (/sys/class/net/IFACE): its operational state, carrier and counters.
//
// The inspector reads it when the agent is told its machine's interface
// (`bulwark agent --nic IFACE`); a local cluster on one shared network
// stack has no interface of its own per machine and keeps the emulated
// link file (inspector.h).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace bulwark::agent {

struct LinkReading {
  std::string iface;
  std::string operstate;  // "up", "down", "lowerlayerdown", "unknown" (loopback, some virtual links), ...
  bool carrier = false;   // a peer or cable on the other end
  uint64_t carrier_changes = 0;  // every carrier up and down since the interface was created
  uint64_t rx_errors = 0, tx_errors = 0, rx_dropped = 0, tx_dropped = 0;
};

// NotFound naming the interface and where to look when it does not exist.
Result<LinkReading> ReadLink(const std::string& sysfs_net, const std::string& iface);

// Usable: up (or "unknown", which links without a state machine report
// while passing traffic) and with carrier.
bool LinkUp(const LinkReading& r);

// One line for a person: "eth0 down (operstate lowerlayerdown, no carrier)".
std::string DescribeLink(const LinkReading& r);

// Carrier changes between two readings of the same interface: a link that
// went down and came back between two inspections (a flap shorter than the
// inspection period) shows only here.
uint64_t FlapsBetween(const LinkReading& before, const LinkReading& now);

}  // namespace bulwark::agent
