#include "cluster/local/netns.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "common/files.h"

namespace bulwark::cluster {
namespace {

constexpr int kIndexes = 250;  // K in 1..250: 10.213.K.0/24
constexpr double kIpTimeout = 10;

std::vector<std::string> Plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string Record(const Layout& layout) { return layout.netns(); }

Status Ip(CommandRunner& run, const std::vector<std::string>& argv) {
  CommandResult r = run.Run(argv, kIpTimeout);
  if (!r.ok()) return Status::IOError(r.Describe(argv));
  return Status::OK();
}

// `add`, and where the name is taken, `del` and `add` again. Every name
// made here carries the K that MakeBridge claimed, so a name already taken
// is a leftover of an earlier cluster with the same K: one that died
// without `bulwark down`, or one whose namespaces the kernel was still
// tearing down (it destroys a deleted namespace's links asynchronously)
// when its bridge, and with it K, was freed. Two clusters brought up at
// once in a fresh clone's suite met that as "ip link add bw217h1: File
// exists".
Status AddFresh(CommandRunner& run, const std::vector<std::string>& add, const std::vector<std::string>& del) {
  CommandResult r = run.Run(add, kIpTimeout);
  if (r.ok()) return Status::OK();
  if (r.err.find("File exists") == std::string::npos) return Status::IOError(r.Describe(add));
  (void)run.Run(del, kIpTimeout);
  return Ip(run, add);
}

// A free K: the first from a start that depends on the directory whose
// bridge can be made (the kernel refuses a name in use, so two clusters
// made at once cannot pick the same one).
Result<int> MakeBridge(CommandRunner& run, const Layout& layout) {
  std::error_code ec;
  const std::string abs = std::filesystem::absolute(layout.dir, ec).string();
  const int start = static_cast<int>(std::hash<std::string>{}(abs) % kIndexes);
  for (int i = 0; i < kIndexes; ++i) {
    const int k = 1 + (start + i) % kIndexes;
    const std::vector<std::string> add = {"ip", "link", "add", "bwb" + std::to_string(k), "type", "bridge"};
    CommandResult r = run.Run(add, kIpTimeout);
    if (r.ok()) return k;
    if (r.err.find("File exists") == std::string::npos) return Status::IOError(r.Describe(add));
  }
  return Status::Unavailable("no free bridge bwb1..bwb" + std::to_string(kIndexes) +
                                   ": 'ip link' lists them; 'bulwark down' each cluster, or delete stale ones");
}

NetnsPlan PlanFor(int k, const std::vector<std::string>& ids, const std::vector<int>& racks_of) {
  NetnsPlan p;
  p.index = k;
  const std::string K = std::to_string(k);
  p.bridge = "bwb" + K;
  const std::string net = "10.213." + K + ".";
  p.gateway = net + "1";
  const int racks = racks_of.empty() ? 0 : *std::max_element(racks_of.begin(), racks_of.end()) + 1;
  for (int r = 0; r < racks; ++r) {
    const std::string n = std::to_string(r);
    p.racks.push_back({RackName(r), p.bridge + "r" + n, "bw" + K + "u" + n, "bw" + K + "u" + n + "r"});
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string n = std::to_string(i + 1);
    p.machines.push_back({ids[i], "bw" + K + "-" + ids[i], "bw" + K + "h" + n, net + std::to_string(i + 2),
                          racks_of.empty() ? "" : RackName(racks_of[i])});
  }
  return p;
}

// Each rack's bridge, up, with its uplink's two ends on it and on the spine.
Status WireRacks(CommandRunner& run, const NetnsPlan& p) {
  for (const NetnsRack& r : p.racks) {
    BULWARK_RETURN_IF_ERROR(AddFresh(run, {"ip", "link", "add", r.bridge, "type", "bridge"}, {"ip", "link", "del", r.bridge}));
    BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "link", "set", r.bridge, "up"}));
    BULWARK_RETURN_IF_ERROR(AddFresh(run, {"ip", "link", "add", r.uplink, "type", "veth", "peer", "name", r.rack_uplink},
                                     {"ip", "link", "del", r.uplink}));
    BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "link", "set", r.rack_uplink, "master", r.bridge, "up"}));
    BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "link", "set", r.uplink, "master", p.bridge, "up"}));
  }
  return Status::OK();
}

Status Wire(CommandRunner& run, const NetnsPlan& p) {
  BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "addr", "add", p.gateway + "/24", "dev", p.bridge}));
  BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "link", "set", p.bridge, "up"}));
  BULWARK_RETURN_IF_ERROR(WireRacks(run, p));
  for (const NetnsMachine& m : p.machines) {
    const std::string peer = m.host_veth + "n";  // the namespace's end, renamed eth0 inside
    BULWARK_RETURN_IF_ERROR(AddFresh(run, {"ip", "netns", "add", m.ns}, {"ip", "netns", "del", m.ns}));
    BULWARK_RETURN_IF_ERROR(AddFresh(run, {"ip", "link", "add", m.host_veth, "type", "veth", "peer", "name", peer},
                                     {"ip", "link", "del", m.host_veth}));
    BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "link", "set", peer, "netns", m.ns}));
    BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "link", "set", m.host_veth, "master", p.BridgeOf(m), "up"}));
    BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "-n", m.ns, "link", "set", peer, "name", kNetnsLink}));
    BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "-n", m.ns, "addr", "add", m.address + "/24", "dev", kNetnsLink}));
    BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "-n", m.ns, "link", "set", kNetnsLink, "up"}));
    BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "-n", m.ns, "link", "set", "lo", "up"}));
  }
  return Status::OK();
}

nlohmann::json Encode(const NetnsPlan& p) {
  nlohmann::json machines = nlohmann::json::array();
  for (const NetnsMachine& m : p.machines) {
    nlohmann::json j = {{"id", m.id}, {"ns", m.ns}, {"host_veth", m.host_veth}, {"address", m.address}};
    if (!m.rack.empty()) j["rack"] = m.rack;
    machines.push_back(j);
  }
  nlohmann::json racks = nlohmann::json::array();
  for (const NetnsRack& r : p.racks) {
    racks.push_back({{"name", r.name}, {"bridge", r.bridge}, {"uplink", r.uplink}, {"rack_uplink", r.rack_uplink}});
  }
  return {{"index", p.index}, {"bridge", p.bridge}, {"gateway", p.gateway}, {"machines", machines}, {"racks", racks}};
}

// Both ends: what leaves the host towards the machine, and what leaves the
// machine. The root qdisc replaced by `qdisc`, or deleted when it is empty.
Status RootQdisc(CommandRunner& run, const NetnsMachine& m, const std::vector<std::string>& qdisc) {
  for (bool inside : {false, true}) {
    std::vector<std::string> argv = {"tc"};
    if (inside) argv.insert(argv.end(), {"-n", m.ns});
    const std::string dev = inside ? kNetnsLink : m.host_veth;
    if (qdisc.empty()) {
      const std::vector<std::string> del = Plus(argv, {"qdisc", "del", "dev", dev, "root"});
      CommandResult r = run.Run(del, kIpTimeout);
      // No qdisc of ours: nothing to remove.
      if (!r.ok() && r.err.find("handle of zero") == std::string::npos &&
          r.err.find("No such file") == std::string::npos) {
        return Status::IOError(r.Describe(del));
      }
      continue;
    }
    BULWARK_RETURN_IF_ERROR(Ip(run, Plus(Plus(argv, {"qdisc", "replace", "dev", dev, "root"}), qdisc)));
  }
  return Status::OK();
}

}  // namespace

const NetnsMachine* NetnsPlan::Find(const std::string& id) const {
  for (const NetnsMachine& m : machines) {
    if (m.id == id) return &m;
  }
  return nullptr;
}

const NetnsRack* NetnsPlan::FindRack(const std::string& name) const {
  for (const NetnsRack& r : racks) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::string NetnsPlan::BridgeOf(const NetnsMachine& m) const {
  const NetnsRack* r = m.rack.empty() ? nullptr : FindRack(m.rack);
  return r != nullptr ? r->bridge : bridge;
}

std::string RackName(int index) { return "r" + std::to_string(index); }

std::vector<int> RacksOf(int machines, int standby, int racks) {
  std::vector<int> of;
  if (racks <= 0) return of;
  for (int i = 0; i < machines; ++i) of.push_back(static_cast<int>(static_cast<int64_t>(i) * racks / machines));
  for (int j = 0; j < standby; ++j) of.push_back(j % racks);
  return of;
}

Status NetnsAvailable(CommandRunner& run) {
  if (::geteuid() != 0) return Status::FailedPrecondition("not root");
  CommandResult r = run.Run({"ip", "netns", "list"}, kIpTimeout);
  if (!r.ok()) return Status::FailedPrecondition("'ip netns' does not work here: " + r.Describe({"ip", "netns", "list"}));
  return Status::OK();
}

Result<NetnsPlan> CreateNetns(CommandRunner& run, const Layout& layout, const std::vector<std::string>& ids,
                              const std::vector<int>& racks_of) {
  if (ids.size() > 253) return Status::InvalidArgument("at most 253 machines fit one namespace subnet");
  if (!racks_of.empty() && racks_of.size() != ids.size()) {
    return Status::InvalidArgument("a rack for each of the " + std::to_string(ids.size()) + " machines, not " +
                                   std::to_string(racks_of.size()));
  }
  if (Result<NetnsPlan> old = LoadNetns(layout); old.ok()) {
    // A cluster in this directory that was not brought down.
    BULWARK_RETURN_IF_ERROR(DestroyNetns(run, layout, *old));
  }
  Result<int> k = MakeBridge(run, layout);
  if (!k.ok()) return k.status();
  NetnsPlan plan = PlanFor(*k, ids, racks_of);
  if (Status st = Wire(run, plan); !st.ok()) {
    (void)DestroyNetns(run, layout, plan);
    return Status::IOError("cannot make the machines' namespaces: " + st.message());
  }
  BULWARK_RETURN_IF_ERROR(WriteFileAtomic(Record(layout), Encode(plan).dump(2) + "\n"));
  return plan;
}

Result<NetnsPlan> LoadNetns(const Layout& layout) {
  Result<std::string> text = ReadFile(Record(layout));
  if (!text.ok()) return Status::NotFound("no " + Record(layout));
  try {
    const nlohmann::json j = nlohmann::json::parse(*text);
    NetnsPlan p;
    p.index = j.at("index").get<int>();
    p.bridge = j.at("bridge").get<std::string>();
    p.gateway = j.at("gateway").get<std::string>();
    for (const nlohmann::json& m : j.at("machines")) {
      p.machines.push_back({m.at("id").get<std::string>(), m.at("ns").get<std::string>(),
                            m.at("host_veth").get<std::string>(), m.at("address").get<std::string>(),
                            m.value("rack", std::string())});
    }
    for (const nlohmann::json& r : j.value("racks", nlohmann::json::array())) {
      p.racks.push_back({r.at("name").get<std::string>(), r.at("bridge").get<std::string>(),
                         r.at("uplink").get<std::string>(), r.at("rack_uplink").get<std::string>()});
    }
    return p;
  } catch (const std::exception& e) {
    return Status::Corrupt(Record(layout) + " is not a namespace plan (" + e.what() +
                           "); delete the bw* namespaces and bridge by hand ('ip netns', 'ip link'), then the file");
  }
}

Status DestroyNetns(CommandRunner& run, const Layout& layout, const NetnsPlan& plan) {
  std::string failed;
  auto note = [&](const std::vector<std::string>& argv) {
    CommandResult r = run.Run(argv, kIpTimeout);
    const bool gone = r.err.find("No such file") != std::string::npos || r.err.find("Cannot find device") != std::string::npos;
    if (!r.ok() && !gone) failed += (failed.empty() ? "" : "; ") + r.Describe(argv);
  };
  // The host ends first, by name: deleting a pair is synchronous, while a
  // deleted namespace's links go when the kernel gets to them, and the
  // bridge, deleted last, is what frees K for the next cluster.
  for (const NetnsMachine& m : plan.machines) note({"ip", "link", "del", m.host_veth});
  for (const NetnsMachine& m : plan.machines) note({"ip", "netns", "del", m.ns});
  for (const NetnsRack& r : plan.racks) {
    note({"ip", "link", "del", r.uplink});  // both ends of the pair
    note({"ip", "link", "del", r.bridge});
  }
  note({"ip", "link", "del", plan.bridge});
  std::remove(Record(layout).c_str());
  if (!failed.empty()) return Status::IOError("removing the machines' namespaces: " + failed);
  return Status::OK();
}

std::vector<std::string> InNetns(const NetnsMachine& m, std::vector<std::string> argv) {
  std::vector<std::string> out = {"/usr/sbin/ip", "netns", "exec", m.ns};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

Status SetLinkUp(CommandRunner& run, const NetnsMachine& m, bool up) {
  return Ip(run, {"ip", "-n", m.ns, "link", "set", kNetnsLink, up ? "up" : "down"});
}

Status ShapeLink(CommandRunner& run, const NetnsMachine& m, double rate_mbit) {
  if (rate_mbit <= 0) return RootQdisc(run, m, {});
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.3fmbit", rate_mbit);
  // A burst of 256 KiB and a queue of 16 MiB: a collective's megabytes
  // wait for tokens rather than being dropped.
  return RootQdisc(run, m, {"tbf", "rate", rate, "burst", "256kb", "limit", "16mb"});
}

Status Partition(CommandRunner& run, const NetnsPlan& plan, const NetnsMachine& m, bool cut) {
  if (cut) return Ip(run, {"ip", "link", "set", m.host_veth, "nomaster"});
  return Ip(run, {"ip", "link", "set", m.host_veth, "master", plan.BridgeOf(m)});
}

Status SetUplinkUp(CommandRunner& run, const NetnsRack& rack, bool up) {
  // The spine's end: the rack's end loses its carrier with it, so the rack's
  // bridge forwards nothing towards the spine, and the spine nothing back.
  return Ip(run, {"ip", "link", "set", rack.uplink, up ? "up" : "down"});
}

}  // namespace bulwark::cluster
