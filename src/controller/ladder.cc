#include "controller/ladder.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>

namespace bulwark::controller {

// ---------------------------------------------------------------------------
// Configuration

namespace {
const std::set<std::string>& KnownRungs() {
  static const std::set<std::string> k = {"diagnose", "reattempt", "rollback", "replay"};
  return k;
}
const std::set<std::string>& KnownTests() {
  static const std::set<std::string> k = {"compute", "device", "network", "alignment"};
  return k;
}
}  // namespace

Status LadderConfig::Validate() const {
  std::set<std::string> seen;
  for (const std::string& r : rungs) {
    if (KnownRungs().count(r) == 0) {
      return Status::InvalidArgument("policy: ladder rung '" + r +
                                     "' is unknown; use diagnose, reattempt, rollback or replay");
    }
    if (!seen.insert(r).second) return Status::InvalidArgument("policy: ladder rung '" + r + "' is listed twice");
  }
  for (const std::string& t : tests) {
    if (KnownTests().count(t) == 0) {
      return Status::InvalidArgument("policy: ladder test '" + t + "' is unknown; use compute, device, network or alignment");
    }
  }
  if (diagnose_budget.count() <= 0 || replay_budget.count() <= 0) {
    return Status::InvalidArgument("policy: ladder diagnose_budget and replay_budget must be positive (got " +
                                   FormatDuration(diagnose_budget) + " and " + FormatDuration(replay_budget) + ")");
  }
  if (!(compute_slow_ratio > 1.0) || !(net_slow_ratio > 1.0)) {
    return Status::InvalidArgument("policy: ladder compute_slow_ratio and net_slow_ratio must be above 1");
  }
  if (settle_steps < 1 || replay_k < 0) {
    return Status::InvalidArgument("policy: ladder settle_steps must be at least 1 and replay_k not negative");
  }
  return Status::OK();
}

Status ApplyLadderFlags(const std::string& rungs, const std::string& tests, const std::string& budget_s,
                        LadderConfig* config) {
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    if (s == "none") return out;
    size_t start = 0;
    for (;;) {
      const size_t comma = s.find(',', start);
      out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) return out;
      start = comma + 1;
    }
  };
  if (!rungs.empty()) config->rungs = split(rungs);
  if (!tests.empty()) config->tests = split(tests);
  if (!budget_s.empty()) {
    char* end = nullptr;
    const double s = std::strtod(budget_s.c_str(), &end);
    if (*end != '\0' || !(s >= 0) || s > 86400) {
      return Status::InvalidArgument("policy: ladder budget '" + budget_s + "' is not a number of seconds; e.g. 60");
    }
    config->diagnose_budget = Duration(static_cast<int64_t>(s * 1000));
  }
  return config->Validate();
}

Status ApplyLadderAlignEvery(const std::string& seconds, LadderConfig* config) {
  if (seconds.empty()) return Status::OK();
  char* end = nullptr;
  const double s = std::strtod(seconds.c_str(), &end);
  if (*end != '\0' || !(s >= 0) || s > 7 * 86400) {
    return Status::InvalidArgument("policy: ladder align-every '" + seconds +
                                   "' is not a number of seconds; e.g. 600 (0: off)");
  }
  config->align_every = Duration(static_cast<int64_t>(s * 1000));
  return Status::OK();
}

// ---------------------------------------------------------------------------
// States and the transition table

const char* LadderStateName(LadderState s) {
  switch (s) {
    case LadderState::kIdle: return "idle";
    case LadderState::kDiagnosing: return "diagnosing";
    case LadderState::kWatching: return "watching";
    case LadderState::kReplaying: return "replaying";
  }
  return "unknown";
}

const char* LadderInputName(LadderInput i) {
  switch (i) {
    case LadderInput::kDiagnose: return "diagnose";
    case LadderInput::kRestart: return "restart";
    case LadderInput::kReplay: return "replay";
    case LadderInput::kSettled: return "settled";
    case LadderInput::kExhausted: return "exhausted";
  }
  return "unknown";
}

const std::vector<LadderTransition>& LadderTable() {
  using S = LadderState;
  using I = LadderInput;
  static const std::vector<LadderTransition> t = {
      // A trigger: the first enabled rung.
      {S::kIdle, I::kDiagnose, S::kDiagnosing},
      {S::kIdle, I::kRestart, S::kWatching},  // diagnose disabled: reattempt first
      {S::kIdle, I::kReplay, S::kReplaying},  // only replay (and rollback) enabled
      {S::kIdle, I::kExhausted, S::kIdle},    // nothing enabled that applies
      // Diagnostics in: evict and restart, reattempt, or climb past both.
      {S::kDiagnosing, I::kRestart, S::kWatching},
      {S::kDiagnosing, I::kReplay, S::kReplaying},
      {S::kDiagnosing, I::kExhausted, S::kIdle},
      // The fault came back while watching: the next rung.
      {S::kWatching, I::kDiagnose, S::kDiagnosing},
      {S::kWatching, I::kRestart, S::kWatching},
      {S::kWatching, I::kReplay, S::kReplaying},
      {S::kWatching, I::kExhausted, S::kIdle},
      {S::kWatching, I::kSettled, S::kIdle},
      // Replay in: evict the culprit and restart, or give up.
      {S::kReplaying, I::kRestart, S::kWatching},
      {S::kReplaying, I::kExhausted, S::kIdle},
  };
  return t;
}

Duration LadderBudget(LadderState s, const LadderConfig& config) {
  switch (s) {
    case LadderState::kDiagnosing: return config.diagnose_budget;
    case LadderState::kReplaying: return config.replay_budget;
    case LadderState::kIdle:
    case LadderState::kWatching: return Duration(0);
  }
  return Duration(0);
}

Result<LadderState> LadderNext(LadderState from, LadderInput on) {
  for (const LadderTransition& t : LadderTable()) {
    if (t.from == from && t.on == on) return t.to;
  }
  return Status::FailedPrecondition(std::string("ladder: no transition from ") + LadderStateName(from) + " on " +
                                    LadderInputName(on));
}

Status LadderStatus::Move(LadderInput on) {
  Result<LadderState> to = LadderNext(state, on);
  if (!to.ok()) return to.status();
  state = *to;
  return Status::OK();
}

// ---------------------------------------------------------------------------
// Diagnostics verdict

NetworkLinkMap NetworkLinks(const std::vector<MachineId>& machines) {
  NetworkLinkMap links;
  const size_t n = machines.size();
  if (n < 2) return links;
  const size_t count = n == 2 ? 1 : n;  // two machines: one link, not the same link twice
  for (size_t p = 0; p < count; ++p) {
    links["net" + std::to_string(p)] = {machines[p], machines[(p + 1) % n]};
  }
  return links;
}

int NetworkLinkIndex(const std::string& name) {
  if (name.rfind("net", 0) != 0 || name.size() == 3) return -1;
  int i = 0;
  for (size_t c = 3; c < name.size(); ++c) {
    if (name[c] < '0' || name[c] > '9' || i > 1000000) return -1;
    i = i * 10 + (name[c] - '0');
  }
  return i;
}

int NetworkLinkRound(int index, int links) {
  if (links % 2 == 1 && links > 1 && index == links - 1) return 2;
  return index % 2;
}

namespace {

bool IsNetworkResult(const std::string& test, std::string* link) {
  for (const char* prefix : {"network/", "network-part/"}) {
    const size_t n = std::strlen(prefix);
    if (test.compare(0, n, prefix) == 0) {
      *link = test.substr(n);
      return true;
    }
  }
  return false;
}

// The network rule (JudgeDiagnostics): which links fail, then which machines
// they blame.
void JudgeLinks(const std::vector<MachineId>& machines, const std::map<MachineId, MachineDiagnostics>& reports,
                const LadderConfig& config, const NetworkLinkMap& links,
                const std::function<void(const MachineId&, const std::string&)>& fail) {
  if (links.empty()) return;  // no network test was asked for
  struct Seen {
    bool reported = false, failed = false;
    double ms = 0;
    std::string detail;
  };
  std::map<std::string, Seen> seen;
  for (const MachineId& m : machines) {
    auto it = reports.find(m);
    if (it == reports.end()) continue;
    for (const DiagnosticResult& r : it->second.results) {
      std::string link;
      if (!IsNetworkResult(r.test, &link) || links.count(link) == 0) continue;
      Seen& s = seen[link];
      s.reported = true;
      if (!r.passed) {
        s.failed = true;
        s.detail += (s.detail.empty() ? "" : "; ") + r.detail;
      } else if (r.test.rfind("network/", 0) == 0) {
        s.ms = r.ms;
        if (s.detail.empty()) s.detail = r.detail;
      }
    }
  }
  std::vector<double> times;
  for (const auto& [name, s] : seen) {
    if (!s.failed && s.ms > 0) times.push_back(s.ms);
  }
  std::sort(times.begin(), times.end());
  // The lower median: with one bad machine in a ring of four, half the
  // links are slow, and the plain median would sit between the two kinds.
  const double reference = times.size() >= 3 ? times[(times.size() - 1) / 2] : 0;
  std::map<std::string, std::string> bad;  // link -> why
  for (const auto& [name, ends] : links) {
    bool both_answered = true;
    for (const MachineId& m : ends) both_answered = both_answered && reports.count(m) > 0;
    auto it = seen.find(name);
    if (it == seen.end()) {
      // A machine that did not answer is failed for that already; a link
      // both ends answered without measuring is a failed link.
      if (both_answered) bad[name] = "no result";
      continue;
    }
    const Seen& s = it->second;
    if (s.failed) {
      bad[name] = "failed: " + s.detail;
    } else if (reference > 0 && s.ms >= config.net_slow_ratio * reference) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "took %.0f ms, %.1fx the reference link's %.0f ms", s.ms, s.ms / reference,
                    reference);
      bad[name] = buf + (s.detail.empty() ? std::string() : " (" + s.detail + ")");
    }
  }
  if (bad.empty()) return;
  std::map<MachineId, int> total, failing;
  for (const auto& [name, ends] : links) {
    for (const MachineId& m : ends) {
      ++total[m];
      if (bad.count(name)) ++failing[m];
    }
  }
  std::set<MachineId> blamed, silent;
  for (const auto& [m, f] : failing) {
    if (reports.count(m) == 0) silent.insert(m);  // failed already: "no answer"
    else if (f >= 2 || f == total[m]) blamed.insert(m);
  }
  for (const auto& [name, why] : bad) {
    const std::vector<MachineId>& ends = links.at(name);
    const std::string peer_a = ends[0], peer_b = ends.size() > 1 ? ends[1] : ends[0];
    const bool explained = blamed.count(peer_a) || blamed.count(peer_b) || silent.count(peer_a) || silent.count(peer_b);
    for (const MachineId& m : ends) {
      if (blamed.count(m) || !explained) {
        fail(m, "network link " + name + " (" + peer_a + "-" + peer_b + ") " + why);
      }
    }
  }
}

}  // namespace

std::string StrictMajority(const std::map<std::string, int>& counts) {
  int total = 0;
  for (const auto& [h, c] : counts) total += c;
  for (const auto& [h, c] : counts) {
    if (2 * c > total) return h;
  }
  return "";
}

DiagnosticsVerdict JudgeDiagnostics(const std::vector<MachineId>& machines,
                                    const std::map<MachineId, MachineDiagnostics>& reports,
                                    const LadderConfig& config, const std::string& budget_note,
                                    const NetworkLinkMap& links) {
  // Each machine's answer, found once: the fleet is 12,500 machines.
  std::vector<const MachineDiagnostics*> answers(machines.size(), nullptr);
  for (size_t i = 0; i < machines.size(); ++i) {
    auto it = reports.find(machines[i]);
    if (it != reports.end()) answers[i] = &it->second;
  }
  return JudgeAnswers(machines, answers, reports, config, budget_note, links);
}

DiagnosticsVerdict JudgeAnswers(const std::vector<MachineId>& machines,
                                const std::vector<const MachineDiagnostics*>& answers,
                                const std::map<MachineId, MachineDiagnostics>& reports, const LadderConfig& config,
                                const std::string& budget_note, const NetworkLinkMap& links) {
  DiagnosticsVerdict v;
  auto fail = [&](const MachineId& m, const std::string& why) {
    std::string& w = v.failed[m];
    w += (w.empty() ? "" : "; ") + why;
  };
  JudgeLinks(machines, reports, config, links, fail);
  // The fleet's median compute time: a slow machine is judged against its
  // peers on this host, not against a number measured elsewhere.
  std::vector<double> compute_ms;
  std::map<std::string, int> hashes;
  for (const MachineDiagnostics* d : answers) {
    if (d == nullptr) continue;
    for (const DiagnosticResult& r : d->results) {
      if (r.test == "compute" && r.passed && r.ms > 0) compute_ms.push_back(r.ms);
    }
    if (!d->alignment_hash.empty()) ++hashes[d->alignment_hash];
  }
  double median = 0;
  if (!compute_ms.empty()) {
    std::sort(compute_ms.begin(), compute_ms.end());
    const size_t n = compute_ms.size();
    median = n % 2 ? compute_ms[n / 2] : (compute_ms[n / 2 - 1] + compute_ms[n / 2]) / 2;
  }
  const std::string majority = StrictMajority(hashes);
  for (size_t i = 0; i < machines.size(); ++i) {
    const MachineId& m = machines[i];
    if (answers[i] == nullptr) {
      fail(m, "no answer" + budget_note);
      continue;
    }
    for (const DiagnosticResult& r : answers[i]->results) {
      std::string link;
      if (IsNetworkResult(r.test, &link)) continue;  // judged per link above
      if (!r.passed) {
        fail(m, r.test + " failed" + (r.detail.empty() ? "" : ": " + r.detail));
      } else if (r.test == "compute" && median > 0 && compute_ms.size() >= 2 &&
                 r.ms >= config.compute_slow_ratio * median) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "compute check took %.0f ms, %.1fx the fleet's median %.0f ms", r.ms,
                      r.ms / median, median);
        fail(m, buf);
      }
    }
    const std::string& h = answers[i]->alignment_hash;
    if (!h.empty() && !majority.empty() && h != majority) {
      fail(m, "alignment hash " + h.substr(0, 16) + " differs from the majority's " + majority.substr(0, 16));
    } else if (!h.empty() && majority.empty() && hashes.size() > 1) {
      v.why += (v.why.empty() ? "" : "; ") + std::string("alignment hashes have no strict majority");
    }
  }
  const size_t n = machines.size();
  if (n > 1 && 2 * v.failed.size() >= n) {
    v.inconclusive = true;
    v.why = std::to_string(v.failed.size()) + " of " + std::to_string(n) +
            " machines failed diagnostics: the tests or their environment, not the machines; nobody evicted";
    return v;
  }
  if (v.failed.empty()) {
    if (v.why.empty()) v.why = "all " + std::to_string(n) + " machine(s) passed diagnostics";
    return v;
  }
  std::string who;
  for (const auto& [m, why] : v.failed) who += (who.empty() ? "" : "; ") + m + ": " + why;
  v.why = who;
  return v;
}

// ---------------------------------------------------------------------------
// Dual-phase replay

Result<ReplayPlan> PlanReplay(int machines, int pp, int k) {
  if (pp < 1 || machines < 1 || machines % pp != 0) {
    return Status::InvalidArgument("replay: " + std::to_string(machines) + " machines do not split into " +
                                   std::to_string(pp) + " pipeline stages");
  }
  ReplayPlan p;
  p.pp = pp;
  p.dp = machines / pp;
  if (k == 0) {
    k = 1;
    for (int c = 1; c <= p.dp; ++c) {
      if (p.dp % c == 0 && c * pp >= 2 && p.dp / c >= 2) {
        k = c;
        break;
      }
    }
  }
  p.k = k;
  if (k < 1 || p.dp % k != 0) {
    return Status::InvalidArgument("replay: k=" + std::to_string(k) + " does not divide DP=" + std::to_string(p.dp));
  }
  const int per = p.dp / k;  // replicas of a stage in one horizontal group; also n
  p.horizontal.assign(k * pp, {});
  p.vertical.assign(per, {});
  for (int slot = 0; slot < machines; ++slot) {
    const int dp = slot % p.dp, stage = slot / p.dp;
    p.horizontal[stage * k + dp / per].push_back(slot);
    p.vertical[dp % per].push_back(slot);
  }
  return p;
}

std::optional<int> ReplayCulprit(const ReplayPlan& plan, const std::vector<int>& failed_horizontal,
                                 const std::vector<int>& failed_vertical) {
  if (failed_horizontal.size() != 1 || failed_vertical.size() != 1) return std::nullopt;
  const int h = failed_horizontal[0], v = failed_vertical[0];
  if (h < 0 || h >= static_cast<int>(plan.horizontal.size()) || v < 0 ||
      v >= static_cast<int>(plan.vertical.size())) {
    return std::nullopt;
  }
  for (int a : plan.horizontal[h]) {
    for (int b : plan.vertical[v]) {
      if (a == b) return a;
    }
  }
  return std::nullopt;
}

}  // namespace bulwark::controller
