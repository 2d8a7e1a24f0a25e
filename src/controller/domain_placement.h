// Placement across failure domains (issue 38 item 3, the part the
// simulator needs): which machine takes which slot at a job's start so
// that a domain's loss (a switch and its rack) takes whole replicas, the
// fewest, and leaves standbys in other domains. Pure.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "controller/machine.h"

namespace bulwark::controller {

// `pool`: the machines to place from, each with its domain ("" for none),
// in the order to prefer. `slots`: the placement's size; `pp`: pipeline
// stages, so that slot s x C + c holds stage s of replica c (C = slots /
// pp; ranks are stage-major, trainer/step/pipeline_plan.h).
//
// Each replica takes its pp machines from one domain where the domain
// holds that many (a domain of R machines holds R / pp whole replicas),
// and a domain's remainder (R mod pp) is what the standbys come from
// first, one domain at a time in turn, so that they are spread over as
// many domains as possible; what remains of the remainders makes the
// last replicas, domain after domain; machines with no domain come last.
// When the remainders are not enough standbys, whole replicas become
// standbys, one domain at a time: a packed replica is worth more than a
// standby in one more domain.
// Returns the machines in slot order (min(slots, pool) of them); the ones
// left out, the standbys, go to `reserve` when given.
std::vector<MachineId> DomainAwareSlots(const std::vector<std::pair<MachineId, std::string>>& pool, int slots,
                                        int pp, std::vector<MachineId>* reserve = nullptr);

// Of `slots` (in slot order), how many replicas a loss of `domain` breaks
// (`domain_of` answers each machine's domain).
template <class DomainOf>
int ReplicasInDomain(const std::vector<MachineId>& slots, int pp, const std::string& domain, DomainOf domain_of) {
  const int columns = pp > 0 ? static_cast<int>(slots.size()) / pp : 0;
  std::vector<bool> hit(static_cast<size_t>(columns), false);
  int n = 0;
  for (size_t i = 0; i < slots.size() && columns > 0; ++i) {
    const int c = static_cast<int>(i) % columns;
    if (!hit[c] && domain_of(slots[i]) == domain) {
      hit[c] = true;
      ++n;
    }
  }
  return n;
}

}  // namespace bulwark::controller
