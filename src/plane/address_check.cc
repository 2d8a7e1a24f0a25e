#include "plane/address_check.h"

namespace bulwark::plane {
namespace {

std::string HostOf(const std::string& host_port) {
  if (!host_port.empty() && host_port[0] == '[') {  // [v6]:port
    const size_t close = host_port.find(']');
    return close == std::string::npos ? host_port : host_port.substr(1, close - 1);
  }
  const size_t colon = host_port.rfind(':');
  return colon == std::string::npos ? host_port : host_port.substr(0, colon);
}

Status Refuse(const std::string& machine, const std::string& host, const std::string& why, const std::string& fix) {
  return Status::FailedPrecondition("register: machine " + machine + " advertises " + host + ", " + why +
                                    "; " + fix);
}

}  // namespace

bool IsLoopback(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost";
}

Status CheckAdvertisedAddress(const AddressRules& rules, const std::string& machine, const std::string& advertised) {
  if (advertised.empty() || rules.controller_host.empty()) return Status::OK();
  const std::string host = HostOf(advertised);
  auto ns = rules.namespaces.find(machine);
  if (ns != rules.namespaces.end()) {
    if (host == ns->second.address) return Status::OK();
    return Refuse(machine, host,
                  "not its address in its network namespace (" + ns->second.address + "), so its peers cannot reach it",
                  "start its agent inside it: ip netns exec " + ns->second.ns + " bulwark agent --machine " + machine +
                      " --nic eth0 --address " + ns->second.address + " ...");
  }
  if (!rules.subnet_prefix.empty() && host.rfind(rules.subnet_prefix, 0) != 0) {
    return Refuse(machine, host, "outside the cluster's bridge network (" + rules.subnet_prefix + "0/24)",
                  "start its agent inside its network namespace (ip netns exec bwK-" + machine +
                      "), or give --address with its address on that network");
  }
  // A controller on every interface (0.0.0.0) says nothing about where its
  // agents are: only an address it names is evidence.
  const bool wildcard = rules.controller_host == "0.0.0.0" || rules.controller_host == "::";
  if (IsLoopback(host) && !wildcard && !IsLoopback(rules.controller_host)) {
    return Refuse(machine, host,
                  "a loopback address no other machine can reach (the controller listens on " +
                      rules.controller_host + ")",
                  "give --address with an address its peers reach, or leave --address out to use the interface "
                  "that reaches the controller");
  }
  return Status::OK();
}

}  // namespace bulwark::plane
