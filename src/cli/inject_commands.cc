// `bulwark inject` and `bulwark machine return` (inject_commands.h).
#include "cli/inject_commands.h"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>

#include "control_client/control_client.h"
#include "cluster/layout.h"
#include "cluster/local/local_cluster.h"
#include "cluster/local/netns.h"

namespace bulwark::cli {

using control_client::ControlClient;
namespace {

// A fault on a machine's own link (bulwark up --netns), made here with ip
// and tc as the network would make it: nothing in the agent emulates it,
// and the agent, its ranks and the controller meet it as they find it.
Status InjectPhysical(const Args& a, const cluster::NetnsPlan& plan, const std::string& kind, double factor) {
  const cluster::NetnsMachine* m = plan.Find(a.Get("machine"));
  if (m == nullptr) {
    return Status::NotFound("inject: no machine " + a.Get("machine") + " in this cluster; 'bulwark status' lists them");
  }
  double for_s = -1;
  if (a.Has("for")) {
    char* end = nullptr;
    for_s = std::strtod(a.Get("for").c_str(), &end);
    if (end == a.Get("for").c_str() || *end != '\0' || !(for_s > 0)) {
      return Status::InvalidArgument("inject: --for '" + a.Get("for") + "' is not seconds; e.g. --for 30");
    }
  }
  cluster::SystemRunner run;
  auto wait = [](double s) { std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(s * 1000))); };
  if (kind == "nic-flap") {
    const double down_s = for_s > 0 ? for_s : 2;
    BULWARK_RETURN_IF_ERROR(cluster::SetLinkUp(run, *m, false));
    std::cout << "link of " << m->id << " down for " << down_s << " s" << std::endl;
    wait(down_s);
    BULWARK_RETURN_IF_ERROR(cluster::SetLinkUp(run, *m, true));
    std::cout << "link of " << m->id << " up" << std::endl;
    return Status::OK();
  }
  if (kind == "slow-link") {
    // A 1 Gbit/s link renegotiated down to 1/F of it: a degraded cable or
    // NIC, which every transfer of the machine's ranks meets.
    const double f = factor > 1 ? factor : 10;
    BULWARK_RETURN_IF_ERROR(cluster::ShapeLink(run, *m, 1000 / f));
    std::cout << "link of " << m->id << " limited to " << 1000 / f << " Mbit/s both ways (bulwark inject heal --machine "
              << m->id << " restores it)" << std::endl;
    return Status::OK();
  }
  if (kind == "partition") {
    BULWARK_RETURN_IF_ERROR(cluster::Partition(run, plan, *m, true));
    std::cout << m->id << " cut off: its port is off the bridge, its link up" << std::endl;
    if (for_s <= 0) return Status::OK();
    wait(for_s);
  }
  // heal, or a partition's end
  BULWARK_RETURN_IF_ERROR(cluster::ShapeLink(run, *m, 0));
  BULWARK_RETURN_IF_ERROR(cluster::Partition(run, plan, *m, false));
  BULWARK_RETURN_IF_ERROR(cluster::SetLinkUp(run, *m, true));
  std::cout << "link of " << m->id << " healed" << std::endl;
  return Status::OK();
}

// --for S as seconds (> 0); -1 when not given.
Result<double> ForSeconds(const Args& a) {
  if (!a.Has("for")) return -1.0;
  char* end = nullptr;
  const double s = std::strtod(a.Get("for").c_str(), &end);
  if (end == a.Get("for").c_str() || *end != '\0' || !(s > 0)) {
    return Status::InvalidArgument("inject: --for '" + a.Get("for") + "' is not seconds; e.g. --for 30");
  }
  return s;
}

// A rack's switch (bulwark up --racks): its uplink to the spine down, up,
// or down for --for S [2] and up again. Every machine of the rack is cut
// off at once with its link up: agents and ranks run on, and each agent
// fences itself (cluster/fence.h), as under a real top-of-rack switch.
Status InjectSwitch(const Args& a, const std::string& kind) {
  const cluster::Layout layout{ClusterDir(a)};
  Result<cluster::NetnsPlan> plan = cluster::LoadNetns(layout);
  const cluster::NetnsRack* rack = plan.ok() ? plan->FindRack(a.Get("rack")) : nullptr;
  if (!plan.ok() || plan->racks.empty()) {
    return Status::InvalidArgument("inject: " + kind + " needs a cluster with racks ('bulwark up --racks K')");
  }
  if (rack == nullptr) {
    std::string names;
    for (const cluster::NetnsRack& r : plan->racks) names += (names.empty() ? "" : ", ") + r.name;
    return Status::NotFound("inject: " + kind + " --rack '" + a.Get("rack") + "': this cluster's racks are " + names);
  }
  Result<double> for_s = ForSeconds(a);
  if (!for_s.ok()) return for_s.status();
  std::string members;
  for (const cluster::NetnsMachine& m : plan->machines) {
    if (m.rack == rack->name) members += (members.empty() ? "" : " ") + m.id;
  }
  cluster::SystemRunner run;
  const bool down = kind != "switch-up";
  if (down) {
    BULWARK_RETURN_IF_ERROR(cluster::SetUplinkUp(run, *rack, false));
    std::cout << "switch " << rack->name << " down: " << members << " cut off, their links up" << std::endl;
    const double wait_s = kind == "switch-flap" ? (*for_s > 0 ? *for_s : 2) : *for_s;
    if (wait_s <= 0) return Status::OK();
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000)));
  }
  BULWARK_RETURN_IF_ERROR(cluster::SetUplinkUp(run, *rack, true));
  std::cout << "switch " << rack->name << " up: " << members << " reach the spine again" << std::endl;
  return Status::OK();
}

// A hung host (machine-down's other shape): the machine's agent and every
// process under it stopped with SIGSTOP, alive but silent, and thawed
// after --for S or by `inject thaw`. Made here, not by the agent.
Status InjectFreeze(const Args& a, bool freeze) {
  const cluster::Layout layout{ClusterDir(a)};
  const std::string id = a.Get("machine");
  Result<int> n = cluster::FreezeMachine(layout.agent_pid(id), freeze);
  if (!n.ok()) return Status::NotFound("inject: no running agent for machine " + id + " (" + n.status().message() + ")");
  std::cout << (freeze ? "froze " : "thawed ") << *n << " process(es) of " << id << std::endl;
  if (!freeze || !a.Has("for")) return Status::OK();
  char* end = nullptr;
  const double s = std::strtod(a.Get("for").c_str(), &end);
  if (end == a.Get("for").c_str() || *end != '\0' || !(s > 0)) {
    (void)cluster::FreezeMachine(layout.agent_pid(id), false);
    return Status::InvalidArgument("inject: --for '" + a.Get("for") + "' is not seconds; e.g. --for 10 (thawed again)");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(s * 1000)));
  n = cluster::FreezeMachine(layout.agent_pid(id), false);
  if (!n.ok()) return n.status();
  std::cout << "thawed " << *n << " process(es) of " << id << std::endl;
  return Status::OK();
}

}  // namespace

Status InjectCmd(const Args& a) {
  if (a.positional.size() >= 2 && a.positional[1].rfind("switch-", 0) == 0) {
    const std::string& kind = a.positional[1];
    if ((kind != "switch-down" && kind != "switch-up" && kind != "switch-flap") || !a.Has("rack")) {
      return Status::InvalidArgument("inject: usage: bulwark inject switch-down|switch-up|switch-flap --rack R [--for S]");
    }
    return InjectSwitch(a, kind);
  }
  if (a.positional.size() < 2 || !a.Has("machine")) {
    return Status::InvalidArgument(
        "inject: usage: bulwark inject crash|kill|machine-down|device-fail|nic-flap|corrupt-shard|nan|loss-spike "
        "--machine ID [--rank R] | hang --machine ID [--rank R] [--where collective|compute] | slow --machine ID "
        "--factor F | switch-down|switch-up|switch-flap --rack R [--for S]");
  }
  Result<int> rank = IntFlag(a, "rank", -1);
  if (!rank.ok()) return rank.status();
  double factor = 0;
  if (a.Has("factor")) {
    try {
      size_t used = 0;
      factor = std::stod(a.Get("factor"), &used);
      if (used != a.Get("factor").size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      return Status::InvalidArgument("inject: --factor '" + a.Get("factor") + "' is not a number; e.g. --factor 2");
    }
  }
  // sdc: --mode nan|drift and --rate R travel as the request's where and factor.
  std::string where = a.Get("where");
  if (a.positional[1] == "sdc") {
    where = a.Has("mode") ? a.Get("mode") : "";
    if (a.Has("rate")) {
      try {
        size_t used = 0;
        factor = std::stod(a.Get("rate"), &used);
        if (used != a.Get("rate").size() || !(factor > 0 && factor <= 1)) throw std::invalid_argument("range");
      } catch (const std::exception&) {
        return Status::InvalidArgument("inject: --rate '" + a.Get("rate") + "' is not a probability in (0, 1]; e.g. --rate 0.5");
      }
    }
  } else if (a.Has("mode") || a.Has("rate")) {
    return Status::InvalidArgument("inject: --mode and --rate apply to sdc only");
  }
  const std::string& kind = a.positional[1];
  if (kind == "freeze" || kind == "thaw") return InjectFreeze(a, kind == "freeze");
  if (Result<cluster::NetnsPlan> plan = cluster::LoadNetns(cluster::Layout{ClusterDir(a)});
      plan.ok() && (kind == "nic-flap" || kind == "slow-link" || kind == "partition" || kind == "heal")) {
    return InjectPhysical(a, *plan, kind, factor);
  } else if (kind == "partition" || kind == "heal") {
    return Status::InvalidArgument("inject: " + kind + " needs machines with a network of their own ('bulwark up "
                                   "--netns'); this cluster shares the host's");
  }
  Result<ControlClient> client = ControlClient::Connect(ClusterDir(a));
  if (!client.ok()) return client.status();
  BULWARK_RETURN_IF_ERROR(client->Inject(a.Get("machine"), a.positional[1], *rank, where, factor));
  std::cout << "injected " << a.positional[1] << " on " << a.Get("machine") << "\n";
  return Status::OK();
}

Status MachineCmd(const Args& a) {
  if (a.positional.size() < 2 || a.positional[1] != "return" || !a.Has("machine")) {
    return Status::InvalidArgument("machine: usage: bulwark machine return --machine ID");
  }
  Result<ControlClient> client = ControlClient::Connect(ClusterDir(a));
  if (!client.ok()) return client.status();
  Result<std::string> note = client->ReturnMachine(a.Get("machine"));
  if (!note.ok()) return note.status();
  if (note->empty()) {
    std::cout << "returned " << a.Get("machine") << " to the fleet; it rejoins after its self-check\n";
  } else {
    std::cout << "returned " << a.Get("machine") << " to the fleet, " << *note << "\n";
  }
  return Status::OK();
}

}  // namespace bulwark::cli
