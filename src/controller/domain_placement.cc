#include "controller/domain_placement.h"

#include <algorithm>
#include <map>

namespace bulwark::controller {

std::vector<MachineId> DomainAwareSlots(const std::vector<std::pair<MachineId, std::string>>& pool, int slots,
                                        int pp, std::vector<MachineId>* reserve) {
  pp = std::max(1, pp);
  slots = std::max(0, std::min(slots, static_cast<int>(pool.size())));
  // Domains in the order their first machine comes in the pool.
  std::vector<std::string> order;
  std::map<std::string, std::vector<MachineId>> by_domain;
  std::vector<MachineId> no_domain;
  for (const auto& [id, domain] : pool) {
    if (domain.empty()) {
      no_domain.push_back(id);
      continue;
    }
    auto [it, fresh] = by_domain.try_emplace(domain);
    if (fresh) order.push_back(domain);
    it->second.push_back(id);
  }
  // Whole replicas of each domain, and its remainder.
  std::vector<std::vector<MachineId>> wholes(order.size()), rests(order.size());
  for (size_t d = 0; d < order.size(); ++d) {
    const std::vector<MachineId>& ms = by_domain[order[d]];
    const size_t whole = ms.size() / static_cast<size_t>(pp) * static_cast<size_t>(pp);
    wholes[d].assign(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(whole));
    rests[d].assign(ms.begin() + static_cast<std::ptrdiff_t>(whole), ms.end());
  }
  // The standbys: remainders first, one domain at a time in turn (spread);
  // then machines with no domain.
  size_t spare = pool.size() - static_cast<size_t>(slots);
  std::vector<MachineId> out_reserve;
  auto take_rests = [&] {
    bool took = true;
    while (spare > 0 && took) {
      took = false;
      for (size_t d = 0; d < order.size() && spare > 0; ++d) {
        if (rests[d].empty()) continue;
        out_reserve.push_back(rests[d].back());
        rests[d].pop_back();
        --spare;
        took = true;
      }
    }
  };
  take_rests();
  while (spare > 0 && !no_domain.empty()) {
    out_reserve.push_back(no_domain.back());
    no_domain.pop_back();
    --spare;
  }
  // Then whole replicas go to the reserve, all their machines, one domain
  // at a time in turn: packing beats spreading (a replica broken to spread
  // the standbys would span two switches); a replica only partly needed
  // leaves the rest of its machines to the remainders.
  while (spare > 0) {
    bool took = false;
    for (size_t d = 0; d < order.size() && spare > 0; ++d) {
      if (wholes[d].empty()) continue;
      const auto first = wholes[d].end() - pp;
      rests[d].insert(rests[d].end(), first, wholes[d].end());
      wholes[d].erase(first, wholes[d].end());
      for (int i = 0; i < pp && spare > 0; ++i) {
        out_reserve.push_back(rests[d].back());
        rests[d].pop_back();
        --spare;
      }
      took = true;
    }
    if (!took) break;
  }
  // The job's machines, replica by replica: whole replicas domain by
  // domain, then the remainders, then machines with no domain.
  std::vector<MachineId> replicas;
  for (const auto& w : wholes) replicas.insert(replicas.end(), w.begin(), w.end());
  for (const auto& r : rests) replicas.insert(replicas.end(), r.begin(), r.end());
  replicas.insert(replicas.end(), no_domain.begin(), no_domain.end());
  replicas.resize(static_cast<size_t>(slots));
  // Replica c's stage s takes slot s x C + c.
  const int columns = slots / pp;
  std::vector<MachineId> out(static_cast<size_t>(slots));
  for (int i = 0; i < slots; ++i) {
    const int slot = columns > 0 && i < columns * pp ? (i % pp) * columns + i / pp : i;
    out[static_cast<size_t>(slot)] = replicas[static_cast<size_t>(i)];
  }
  if (reserve != nullptr) *reserve = std::move(out_reserve);
  return out;
}

}  // namespace bulwark::controller
