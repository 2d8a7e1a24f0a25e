#include "cluster/local/netns.h"

#include <unistd.h>

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

NetnsPlan PlanFor(int k, const std::vector<std::string>& ids) {
  NetnsPlan p;
  p.index = k;
  p.bridge = "bwb" + std::to_string(k);
  const std::string net = "10.213." + std::to_string(k) + ".";
  p.gateway = net + "1";
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string n = std::to_string(i + 1);
    p.machines.push_back({ids[i], "bw" + std::to_string(k) + "-" + ids[i], "bw" + std::to_string(k) + "h" + n,
                          net + std::to_string(i + 2)});
  }
  return p;
}

Status Wire(CommandRunner& run, const NetnsPlan& p) {
  BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "addr", "add", p.gateway + "/24", "dev", p.bridge}));
  BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "link", "set", p.bridge, "up"}));
  for (const NetnsMachine& m : p.machines) {
    const std::string peer = m.host_veth + "n";  // the namespace's end, renamed eth0 inside
    BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "netns", "add", m.ns}));
    BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "link", "add", m.host_veth, "type", "veth", "peer", "name", peer}));
    BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "link", "set", peer, "netns", m.ns}));
    BULWARK_RETURN_IF_ERROR(Ip(run, {"ip", "link", "set", m.host_veth, "master", p.bridge, "up"}));
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
    machines.push_back({{"id", m.id}, {"ns", m.ns}, {"host_veth", m.host_veth}, {"address", m.address}});
  }
  return {{"index", p.index}, {"bridge", p.bridge}, {"gateway", p.gateway}, {"machines", machines}};
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

Status NetnsAvailable(CommandRunner& run) {
  if (::geteuid() != 0) return Status::FailedPrecondition("not root");
  CommandResult r = run.Run({"ip", "netns", "list"}, kIpTimeout);
  if (!r.ok()) return Status::FailedPrecondition("'ip netns' does not work here: " + r.Describe({"ip", "netns", "list"}));
  return Status::OK();
}

Result<NetnsPlan> CreateNetns(CommandRunner& run, const Layout& layout, const std::vector<std::string>& ids) {
  if (ids.size() > 253) return Status::InvalidArgument("at most 253 machines fit one namespace subnet");
  if (Result<NetnsPlan> old = LoadNetns(layout); old.ok()) {
    // A cluster in this directory that was not brought down.
    BULWARK_RETURN_IF_ERROR(DestroyNetns(run, layout, *old));
  }
  Result<int> k = MakeBridge(run, layout);
  if (!k.ok()) return k.status();
  NetnsPlan plan = PlanFor(*k, ids);
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
                            m.at("host_veth").get<std::string>(), m.at("address").get<std::string>()});
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
  for (const NetnsMachine& m : plan.machines) note({"ip", "netns", "del", m.ns});
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
  return Ip(run, {"ip", "link", "set", m.host_veth, "master", plan.bridge});
}

}  // namespace bulwark::cluster
