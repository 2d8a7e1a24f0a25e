#include "agent/handoff.h"

#include <set>

namespace bulwark::agent {

const char* HandoffPathName(HandoffPath p) {
  switch (p) {
    case HandoffPath::kRejoin: return "rejoin";
    case HandoffPath::kPrespawned: return "prespawned";
    case HandoffPath::kCold: return "cold";
  }
  return "cold";
}

HandoffPlan PlanHandoff(const std::vector<int>& wanted, const std::string& identity,
                        const std::map<int, RunningProcess>& live, const std::vector<RunningProcess>& spares) {
  HandoffPlan plan;
  auto usable = [&](const RunningProcess& p) { return p.waiting && p.identity == identity; };
  std::set<int> taken_live;  // by old rank
  std::set<pid_t> taken_spare;
  plan.ranks.reserve(wanted.size());
  for (int r : wanted) {
    Handoff h;
    h.rank = r;
    auto it = live.find(r);
    if (it != live.end() && usable(it->second)) {
      h.path = HandoffPath::kRejoin;
      h.pid = it->second.pid;
      taken_live.insert(r);
    }
    plan.ranks.push_back(h);
  }
  for (Handoff& h : plan.ranks) {
    if (h.path != HandoffPath::kCold) continue;
    for (const auto& [r, p] : live) {
      if (taken_live.count(r) || !usable(p)) continue;
      h.path = HandoffPath::kRejoin;
      h.pid = p.pid;
      taken_live.insert(r);
      break;
    }
    if (h.path != HandoffPath::kCold) continue;
    for (const RunningProcess& s : spares) {
      if (taken_spare.count(s.pid) || !usable(s)) continue;
      h.path = HandoffPath::kPrespawned;
      h.pid = s.pid;
      taken_spare.insert(s.pid);
      break;
    }
  }
  for (const auto& [r, p] : live) {
    if (!taken_live.count(r)) plan.stop.push_back(r);
  }
  return plan;
}

std::string JobIdentity(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  static const std::set<std::string> kPerGeneration = {
      "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
      "TORCHELASTIC_RESTART_COUNT", "BULWARK_SHARD_BACKUP_OF"};
  std::string id;
  for (const std::string& a : argv) id += a + '\0';
  id += '\x01';
  for (const auto& [k, v] : env) {
    if (!kPerGeneration.count(k)) id += k + '=' + v + '\0';
  }
  return id;
}

}  // namespace bulwark::agent
