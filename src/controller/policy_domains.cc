// Failure domains (issue 38 item 2): a switch that takes its rack down.
//
// A rack's machines lost at once arrive as one heartbeat loss each, and
// their peers' ranks exit with connection errors a second later. Taken one
// by one they look like several faults: a crash loop, code that fails the
// same way on many machines, a pool drained by one switch. The rule:
//
//   loss    domain_burst_machines (2) of a domain's machines whose
//           heartbeats stopped within domain_burst_window (30 s) of each
//           other are ONE incident that names the domain ("switch r1: 4
//           machines lost"). Each of them is evicted (it is unreachable;
//           a standby takes its slot, or an elastic job narrows), and
//           nothing else is: the peers' peer-lost exits around the burst
//           are noted on the incident and recorded as no crash, so they
//           count toward no crash loop and no attribution.
//   return  when the switch is back, each machine's agent registers again
//           (MachineJoined with a passed self-check: the check) and the
//           machine returns to the pool as a standby, without an
//           operator (the return): it did nothing wrong. With
//           PolicyConfig::checkup_domain_return, a rack whose loss was an
//           incident runs the checkup first and returns when it passes.
//   probation  a second loss of the domain within domain_probation (1 h)
//           of its return is a flapping switch: its machines are evicted
//           for good (not returned on registering), and an operator
//           returns them (OperatorReturned) once the switch is fixed.
//
// A machine with no domain, or domain_burst_machines 0, is handled as
// before: each heartbeat loss is its own machine fault.
#include <algorithm>

#include "controller/crash_attribution.h"
#include "controller/policy_internal.h"

namespace bulwark::controller::internal {
namespace {

std::string Header(const std::string& domain, size_t lost) {
  return "switch " + domain + ": " + std::to_string(lost) + (lost == 1 ? " machine" : " machines") + " lost";
}

// The incident that names the domain: the open one (it holds the burst's
// first machine when that one was placed), or a new one. Its cause becomes
// the domain's header; the single-machine causes go to its notes.
Result<Incident*> DomainIncident(RuleContext& ctx, ClusterState::DomainStatus& d, const std::string& domain,
                                 const std::string& cause, Time fault) {
  Incident* inc = ctx.state.incidents.Current();
  if (inc == nullptr) {
    Result<Incident*> opened = OpenIncident(ctx, IncidentClass::kExplicit, Header(domain, d.lost.size()), fault);
    if (!opened.ok()) return opened.status();
    inc = *opened;
  } else if (inc->domain != domain) {
    inc->notes.push_back(inc->cause);
  }
  inc->notes.push_back(cause);
  inc->domain = domain;
  inc->domain_lost = static_cast<int>(d.lost.size());
  inc->cause = Header(domain, d.lost.size());
  if (!inc->fault || fault < *inc->fault) inc->fault = fault;
  d.incident = inc->id;
  return inc;
}

// Evicts `m`, lost with its domain: it returns when it registers again,
// unless the domain is on probation's wrong side (flapping).
Status EvictWithDomain(RuleContext& ctx, ClusterState::DomainStatus& d, MachineStatus& m, const std::string& domain,
                       const std::string& cause, Time fault) {
  m.lost_with_domain = !d.flapping;
  // A flapping switch's machine is an operator's now: a checkup it was
  // running is void, so that no late answer returns it.
  if (d.flapping && m.checkup != 0) SetCheckup(ctx.state, m, 0);
  if (m.state == MachineState::kEvicted) return Status::OK();
  const std::string why = d.flapping ? "switch " + domain + " down again within its probation (flapping): " + m.id +
                                           " stays out until an operator returns it"
                                     : "switch " + domain + " down: " + m.id + " unreachable; it returns when the switch does";
  int64_t incident = 0;
  if (m.state == MachineState::kActive && ctx.state.job != JobState::kStopped) {
    Result<Incident*> inc = DomainIncident(ctx, d, domain, cause, fault);
    if (!inc.ok()) return inc.status();
    (*inc)->evicted.push_back(m.id);
    (*inc)->resolution = Resolution::kEvictedAndReplaced;
    (*inc)->why = "evicted the machines of switch " + domain + " only";
    incident = (*inc)->id;
  }
  return Emit(ctx, EvictAction(m.id, incident, why));
}

}  // namespace

Result<bool> DomainMachineLost(RuleContext& ctx, const MachineHeartbeatLost& x, const std::string& cause) {
  ClusterState& s = ctx.state;
  MachineStatus* m = s.FindMachine(x.machine);
  if (m == nullptr) return Status::NotFound("machine " + x.machine + " is not known to the controller");
  if (m->domain.empty() || ctx.config.domain_burst_machines <= 0) return false;
  const std::string domain = m->domain;
  ClusterState::DomainStatus& d = s.domains[domain];
  const Time t = x.last_heartbeat;
  // A machine evicted before the window (for a fault of its own) is no part
  // of a burst. One out for its checkup is: it is still in its rack, and its
  // heartbeat stopped with its rack-mates'. Left out, a rack of 2 with one
  // under checkup lost its other machine alone, to a machine fault.
  if (m->state == MachineState::kEvicted && m->checkup == 0 && !d.lost.count(m->id) &&
      m->state_since < t - ctx.config.domain_burst_window) {
    return true;
  }
  const Time newest = d.recent.empty() ? t : std::max(t, d.recent.back().first);
  d.recent.erase(std::remove_if(d.recent.begin(), d.recent.end(),
                                [&](const auto& r) { return r.first < newest - ctx.config.domain_burst_window; }),
                 d.recent.end());
  const bool repeat = std::any_of(d.recent.begin(), d.recent.end(), [&](const auto& r) { return r.second == m->id; });
  if (!repeat) {
    d.recent.push_back({t, m->id});
    std::sort(d.recent.begin(), d.recent.end());
  }
  if (!d.down && static_cast<int>(d.recent.size()) >= ctx.config.domain_burst_machines) {
    // The burst: the domain is down. The losses before it were evicted
    // one by one as machine faults; they join the domain's incident.
    SetDomainDown(ctx.state, d, true);
    d.down_at = d.recent.front().first;
    d.lost.clear();
    d.incident = 0;
    ++d.episodes;
    d.flapping = d.returned_at && d.down_at - *d.returned_at < ctx.config.domain_probation;
    for (const auto& [at, id] : d.recent) d.lost.insert(id);
    // Crashes of the domain's own machines around the burst were the
    // switch's, not theirs.
    s.crashes.erase(std::remove_if(s.crashes.begin(), s.crashes.end(),
                                   [&](const CrashRecord& c) {
                                     return d.lost.count(c.machine) != 0 &&
                                            c.at >= d.down_at - ctx.config.domain_burst_window;
                                   }),
                    s.crashes.end());
    for (const auto& [at, id] : d.recent) {
      if (id == m->id) continue;
      MachineStatus* earlier = s.FindMachine(id);
      if (earlier == nullptr) continue;
      earlier->lost_with_domain = !d.flapping;
      earlier->crashes.clear();
      if (earlier->state == MachineState::kEvicted && s.incidents.Current() != nullptr) {
        Incident& inc = *s.incidents.Current();
        if (std::find(inc.evicted.begin(), inc.evicted.end(), id) != inc.evicted.end()) {
          BULWARK_RETURN_IF_ERROR(DomainIncident(ctx, d, domain, "heartbeat of " + id + " lost", at).status());
        }
      }
      BULWARK_RETURN_IF_ERROR(EvictWithDomain(ctx, d, *earlier, domain, "heartbeat of " + id + " lost", at));
    }
  }
  if (!d.down) return false;  // not (yet) a burst: a machine fault like any other
  d.lost.insert(m->id);
  m->crashes.clear();
  if (d.incident != 0 && s.incidents.Current() != nullptr && s.incidents.Current()->id == d.incident) {
    Incident& inc = *s.incidents.Current();
    inc.domain_lost = static_cast<int>(d.lost.size());
    inc.cause = Header(domain, d.lost.size());
  }
  BULWARK_RETURN_IF_ERROR(EvictWithDomain(ctx, d, *m, domain, cause, t));
  return true;
}

bool DomainEcho(RuleContext& ctx, const RankExited& x) {
  ClusterState& s = ctx.state;
  if (s.domains.empty()) return false;
  const MachineStatus* self = s.FindMachine(x.machine);
  const MachineStatus* peer = x.unreachable.empty() ? nullptr : s.FindMachine(x.unreachable);
  const bool peer_lost = IsPeerLost(x.exit_code, x.log_signature);
  for (auto& [name, d] : s.domains) {
    if (!d.down || d.recent.empty()) continue;
    // Within the burst's window of the domain's latest loss: the peers'
    // exits follow it by a second or two, their reports by a few more.
    if (x.observed < d.down_at - ctx.config.domain_burst_window ||
        x.observed > d.recent.back().first + 2 * ctx.config.domain_burst_window) {
      continue;
    }
    const bool names_domain = peer != nullptr && peer->domain == name;
    if (!names_domain && !peer_lost) continue;
    if (self != nullptr && self->domain == name) return true;  // one of the lost machines' own ranks
    if (Incident* inc = s.incidents.Current(); inc != nullptr && inc->domain == name) {
      if (inc->notes.size() < 64) inc->notes.push_back("peer lost to switch " + name + ": " + Describe(Event{x}));
    }
    // An exit of the generation that answered the loss (the plane passes
    // no older one) means that generation did not form or failed: it is
    // reattempted in place, still counting as no crash. Absorbed without a
    // restart, it left a cluster's job waiting with no ranks (issue 38).
    if (s.last_restart_at && x.observed > *s.last_restart_at && RanksAreLive(s.job) && self != nullptr &&
        self->state == MachineState::kActive) {
      s.restart_pending = true;
      s.restart_reason = "peer lost to switch " + name + " after the restart: " + Describe(Event{x});
    }
    return true;
  }
  return false;
}

Result<bool> DomainReturn(RuleContext& ctx, MachineStatus& m, const MachineJoined& x) {
  if (m.state != MachineState::kEvicted || !m.lost_with_domain) return false;
  ClusterState& s = ctx.state;
  auto it = s.domains.find(m.domain);
  if (!x.self_check_passed) {
    // The check failed: it stays out, an operator's machine now.
    m.lost_with_domain = false;
    m.last_reason = "switch " + m.domain + " back, but its self-check failed" + (x.detail.empty() ? "" : ": " + x.detail);
    return true;
  }
  m.lost_with_domain = false;
  // A checkup the switch cut short (its answer never came) runs again.
  const int64_t cut_short = m.checkup;
  SetCheckup(s, m, 0);
  m.network_alerts.clear();
  m.crashes.clear();
  std::string domain = m.domain;
  int64_t incident = 0;
  if (it != s.domains.end()) {
    ClusterState::DomainStatus& d = it->second;
    if (d.down) {
      SetDomainDown(s, d, false);
      d.returned_at = ctx.now;
      d.recent.clear();
    }
    d.lost.erase(m.id);
    incident = d.incident;
  }
  // A machine whose own checkup the switch cut short is checked again
  // before it serves. With checkup_domain_return, so is a rack whose loss
  // was an incident (it held the job's machines), off the job's path as
  // an over-evicted machine is (policy_checkup.cc); otherwise, and for a
  // rack of standbys only, the rack returns on its self-check.
  const bool check_rack = ctx.config.checkup_domain_return && incident != 0;
  if (ctx.config.checkup_evicted && (check_rack || cut_short != 0)) {
    m.last_reason = "switch " + domain + " back: registered again; checked before it serves";
    BULWARK_RETURN_IF_ERROR(CheckUp(ctx, m, cut_short != 0 ? cut_short : incident));
    return true;
  }
  BULWARK_RETURN_IF_ERROR(SetMachineState(s, m.id, MachineState::kJoining, ctx.now,
                                          "switch " + domain + " back: registered again"));
  BULWARK_RETURN_IF_ERROR(SetMachineState(s, m.id, MachineState::kStandby, ctx.now,
                                          "switch " + domain + " back: self-check passed; on probation for " +
                                              FormatDuration(ctx.config.domain_probation)));
  return true;
}

}  // namespace bulwark::controller::internal
