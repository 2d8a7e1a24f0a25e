// Machines with a network of their own, for the local backend: each machine
// is a Linux network namespace joined to this host by a veth pair on a
// bridge, with its own address. Its agent and ranks run inside it, so a
// link taken down, shaped with tc netem or cut is a real fault that the
// ranks' own traffic meets, as on a cluster.
//
//   host:  bridge bwbK 10.213.K.1/24 ── veth bwKhI ┐
//   ns bwK-ID:                    eth0 10.213.K.(1+I)/24
//
// With racks (`bulwark up --racks R`), failure domains as a top-of-rack
// switch makes them: bwbK is the spine, where the controller listens; each
// rack rN has its own bridge bwbKrN, joined to the spine by one veth pair
// (its uplink, bwKuN on the spine, bwKuNr in the rack), and its machines'
// ports are on the rack's bridge. One subnet still spans them all (the
// bridges switch, nothing routes), so an uplink taken down cuts the whole
// rack off from the controller and the other racks at once, while the
// rack's machines still reach each other, as under a real switch.
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
  std::string rack;       // r1: the rack whose bridge its port is on; "": the spine's (no racks)
};

// A rack's switch: its bridge and its uplink to the spine.
struct NetnsRack {
  std::string name;         // r1
  std::string bridge;       // bwb7r1
  std::string uplink;       // bw7u1: the spine's end of the uplink
  std::string rack_uplink;  // bw7u1r: the rack's end
};

struct NetnsPlan {
  int index = 0;          // K
  std::string bridge;     // bwb7
  std::string gateway;    // 10.213.7.1: the host's address, where the controller listens
  std::vector<NetnsMachine> machines;
  std::vector<NetnsRack> racks;  // none: every machine on the spine

  const NetnsMachine* Find(const std::string& id) const;
  const NetnsRack* FindRack(const std::string& name) const;
  // The bridge `m`'s port belongs on: its rack's, else the spine.
  std::string BridgeOf(const NetnsMachine& m) const;
};

// Rack names r0, r1, ... (index 0, 1, ...).
std::string RackName(int index);
// Each machine's rack index, for `machines` job machines then `standby`
// standbys (up's order) on `racks` racks: the job's machines in equal
// blocks, rack by rack, and the standbys dealt one to a rack in turn, so
// that a rack's loss leaves standbys under the other switches.
std::vector<int> RacksOf(int machines, int standby, int racks);

// The machine's link inside its namespace.
inline constexpr const char* kNetnsLink = "eth0";

// OK when this host can make namespaces (root, `ip netns` works); otherwise
// why not, in one line.
Status NetnsAvailable(CommandRunner& run);

// Makes the bridge and one namespace per id, records the plan in
// DIR/netns.json and returns it. Whatever it made is removed again on error.
// `racks_of`: each id's rack index (one per id), or empty for no racks.
Result<NetnsPlan> CreateNetns(CommandRunner& run, const Layout& layout, const std::vector<std::string>& ids,
                              const std::vector<int>& racks_of = {});

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
// A rack's switch losing its uplink (down) or getting it back (up): every
// machine of the rack cut off from the spine at once, links up.
Status SetUplinkUp(CommandRunner& run, const NetnsRack& rack, bool up);

}  // namespace bulwark::cluster
