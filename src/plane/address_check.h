// Whether an agent's advertised address can serve the cluster: checked when
// it registers, before it can be given ranks.
//
// A machine's ranks listen where its agent says the machine is. An agent
// restarted by hand outside its network namespace advertised 127.0.0.1,
// was accepted, and when the job took it as a standby every neighbour's
// rank failed to connect to it; those exits then stopped a healthy job as
// a crash loop (issue 40). An address nobody else can reach is refused at
// the door instead, with the fix in the message. Pure: Plane::Register and
// its tests call it.
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace bulwark::plane {

struct AddressRules {
  // The host the controller listens on; "" checks nothing. A controller on
  // loopback serves one host, where loopback is everyone's address.
  std::string controller_host;
  // A local cluster in network namespaces (cluster/local/netns.h): each
  // machine's namespace and its address there, and the bridge's subnet
  // prefix ("10.213.7.") for machines the plan does not name.
  struct Namespaced {
    std::string ns;
    std::string address;
  };
  std::map<std::string, Namespaced> namespaces;
  std::string subnet_prefix;
};

// Loopback: 127.0.0.0/8, ::1, "localhost".
bool IsLoopback(const std::string& host);

// OK when `machine` advertising `advertised` ("host:port"; "" for none) can
// be reached by its peers under `rules`; otherwise FailedPrecondition in one
// line that names the address and the fix.
Status CheckAdvertisedAddress(const AddressRules& rules, const std::string& machine, const std::string& advertised);

}  // namespace bulwark::plane
