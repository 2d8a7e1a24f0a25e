// Machines with a network of their own, for the local backend: each machine
// is a Linux network namespace joined to this host by a veth pair on a
// bridge, with its own address. Its agent and ranks run inside it, so a
// link taken down, shaped with tc netem or cut is a real fault that the
// ranks' own traffic meets, as on a cluster.
//
//   host:  bridge bwbK 10.213.K.1/24 ── veth bwKhI ┐
//   ns bwK-ID:                    eth0 10.213.K.(1+I)/24
//
// K is picked free per cluster (several clusters, e.g. tests in parallel,
// each get their own bridge and subnet); DIR/netns.json records the plan so
// that `down` and `inject` find it. Needs root and iproute2.
#pragma once

#include <string>
#include <vector>

#include "cluster/layout.h"
#include "cluster/slurm/command.h"
#include "common/status.h"

namespace bulwark::cluster {

struct NetnsMachine {
  std::string id;         // m01
  std::string ns;         // bw7-m01
  std::string host_veth;  // bw7h1: the host's end, on the bridge
  std::string address;    // 10.213.7.2
};

struct NetnsPlan {
  int index = 0;          // K
  std::string bridge;     // bwb7
  std::string gateway;    // 10.213.7.1: the host's address, where the controller listens
  std::vector<NetnsMachine> machines;

  const NetnsMachine* Find(const std::string& id) const;
};

// The machine's link inside its namespace.
inline constexpr const char* kNetnsLink = "eth0";

// OK when this host can make namespaces (root, `ip netns` works); otherwise
// why not, in one line.
Status NetnsAvailable(CommandRunner& run);

// Makes the bridge and one namespace per id, records the plan in
// DIR/netns.json and returns it. Whatever it made is removed again on error.
Result<NetnsPlan> CreateNetns(CommandRunner& run, const Layout& layout, const std::vector<std::string>& ids);

// The plan `up` recorded; NotFound when the cluster shares the host's network.
Result<NetnsPlan> LoadNetns(const Layout& layout);

// Deletes the namespaces and the bridge (their veths go with them) and the
// record. Goes on past what is already gone.
Status DestroyNetns(CommandRunner& run, const Layout& layout, const NetnsPlan& plan);

// argv run inside `m`'s namespace.
std::vector<std::string> InNetns(const NetnsMachine& m, std::vector<std::string> argv);

// Physical faults, as a switch or a cable would make them:
// the machine's link down (the kernel's carrier and operstate follow) or up;
Status SetLinkUp(CommandRunner& run, const NetnsMachine& m, bool up);
// both directions limited to `rate_mbit` with a token bucket (tc tbf; this
// host's kernel has no netem for delay or loss); 0 removes the limit;
Status ShapeLink(CommandRunner& run, const NetnsMachine& m, double rate_mbit);
// the machine's port taken off the bridge, as a switch isolating it: both
// ends stay up with carrier, every packet goes nowhere, and the machine
// does not know it; and its reverse.
Status Partition(CommandRunner& run, const NetnsPlan& plan, const NetnsMachine& m, bool cut);

}  // namespace bulwark::cluster
