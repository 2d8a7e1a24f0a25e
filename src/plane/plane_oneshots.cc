// The one-shot commands a decision sends beside the desired state: the
// ladder's DIAGNOSE, a checkup's and the periodic bitwise check's, and a
// release's STAGE_RELEASE. Each is queued on its agents' streams; what
// the ranks should run stays the actuator's (actuator.h).
#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "plane/plane.h"

namespace bulwark::plane {

void Plane::SendDiagnoseLocked(const Action& a) {
  // The tests themselves are a one-shot; the ranks' stop is desired
  // state (the actuator's). A replay group or a network link
  // rendezvouses at its first machine on a port of its own, clear of the
  // job's generations.
  std::map<MachineId, std::vector<wire::ReplayAssignment>> replay;
  // A pipeline job's replay: horizontal group h covers stage h / k, where
  // the k x PP horizontal groups come first (ladder_rules.cc).
  const int pp = controller_ ? std::max(1, controller_->state().spec.pp) : 1;
  const int horizontal = static_cast<int>(
      std::count_if(a.group_names.begin(), a.group_names.end(), [](const std::string& n) { return n.rfind('h', 0) == 0; }));
  const int k = std::max(1, horizontal / pp);
  for (size_t g = 0; g < a.groups.size() && g < a.group_names.size(); ++g) {
    const std::string& name = a.group_names[g];
    const bool is_h = name.rfind('h', 0) == 0 && name.size() > 1 && std::isdigit(static_cast<unsigned char>(name[1]));
    for (size_t r = 0; r < a.groups[g].size(); ++r) {
      wire::ReplayAssignment x;
      x.set_pp(pp);
      x.set_stage(is_h && pp > 1 ? std::atoi(name.c_str() + 1) / k : -1);
      x.set_group(a.group_names[g]);
      x.set_rank(static_cast<int>(r));
      x.set_world(static_cast<int>(a.groups[g].size()));
      x.set_master_addr(MasterAddrLocked(a.groups[g][0]));
      x.set_master_port(launch_->master_port_base + 1000 + static_cast<int>((a.incident * 37 + g) % 1000));
      replay[a.groups[g][r]].push_back(std::move(x));
    }
  }
  for (const MachineId& m : a.placement.slots) {
    wire::Command c;
    for (const wire::ReplayAssignment& x : replay[m]) *c.add_replay() = x;
    c.set_kind(wire::Command::DIAGNOSE);
    c.set_id(a.id);
    c.set_incident(a.incident);
    c.set_budget_ms(a.budget_ms);
    for (const std::string& t : a.tests) c.add_tests(t);
    c.set_reason(a.reason);
    AgentForLocked(m).oneshots.push_back(std::move(c));
  }
}

void Plane::SendTestsLocked(const Action& a) {
  if (logged_actions_.insert(a.id).second) LogLocked("action " + a.ToString());
  wire::Command c;
  c.set_kind(wire::Command::DIAGNOSE);
  c.set_id(a.id);
  c.set_incident(a.incident);
  c.set_check(a.check);
  for (int64_t step : a.keep_steps) c.add_keep_steps(step);
  c.set_budget_ms(ToMs(options_.policy.ladder.diagnose_budget));
  for (const std::string& t : a.tests) c.add_tests(t);
  c.set_reason(a.reason);
  if (a.kind == ActionKind::kCheckup) {
    AgentForLocked(a.machine).oneshots.push_back(std::move(c));
    return;
  }
  for (const MachineId& m : a.placement.slots) AgentForLocked(m).oneshots.push_back(c);
}

void Plane::SendStageReleaseLocked(const Action& a) {
  if (logged_actions_.insert(a.id).second) LogLocked("action " + a.ToString());
  // What a START_RANKS of the release will carry, so that the agent's
  // processes match it (agent/handoff.h: JobIdentity).
  const JobLaunch launch = LaunchForLocked(a.release);
  for (const MachineId& m : a.placement.slots) {
    wire::Command c;
    c.set_kind(wire::Command::STAGE_RELEASE);
    c.set_id(a.id);
    c.set_release(a.release);
    c.set_generation(a.placement.generation);
    c.set_world_size(a.placement.world_size());
    c.set_local_world_size(a.placement.ranks_per_machine);
    c.set_elastic(launch.spec.elastic());
    for (const std::string& x : launch.argv) c.add_argv(x);
    for (const auto& [k, v] : launch.env) (*c.mutable_env())[k] = v;
    c.set_spike_factor(options_.policy.spike_factor);
    c.set_spike_rule(options_.policy.spike_rule().Encode());
    c.set_reason(a.reason);
    AgentForLocked(m).oneshots.push_back(std::move(c));
  }
}

}  // namespace bulwark::plane
