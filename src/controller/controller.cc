#include "controller/controller.h"

#include <algorithm>
#include <type_traits>

#include "controller/policy.h"
#include "controller/reconcile.h"

namespace bulwark::controller {
namespace {

// Agents' clocks run ahead of the controller's now and then; an event cannot
// have been observed after the controller received it.
Event ClampToNow(Event event, Time now) {
  std::visit(
      [now](auto& x) {
        x.observed = std::min(x.observed, now);
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, MachineHeartbeatLost>) {
          x.last_heartbeat = std::min(x.last_heartbeat, x.observed);
        }
      },
      event);
  return event;
}

}  // namespace

Result<Controller> Controller::Create(JobSpec spec, PolicyConfig config,
                                      const std::vector<MachineId>& standbys, Time now,
                                      const std::map<MachineId, std::string>& domains) {
  BULWARK_RETURN_IF_ERROR(spec.Validate());
  BULWARK_RETURN_IF_ERROR(config.Validate());
  Controller c(std::move(config));
  c.state_.spec = std::move(spec);
  c.state_.job_since = now;
  c.state_.ledger = Ledger(c.config_.ledger_window);
  c.state_.ledger.Start(now);
  c.last_now_ = now;
  for (const MachineId& id : standbys) {
    Result<MachineStatus*> added = AddMachine(c.state_, id, now);
    if (!added.ok()) return added.status().Annotate("initial standbys");
    if (auto d = domains.find(id); d != domains.end()) (*added)->domain = d->second;
    BULWARK_RETURN_IF_ERROR(
        SetMachineState(c.state_, id, MachineState::kStandby, now, "initial standby"));
  }
  return c;
}

Status Controller::Advance(Time now) {
  if (now < last_now_) {
    return Status::InvalidArgument("controller: time went backwards: now " + FormatTime(now) +
                                   " is before " + FormatTime(last_now_));
  }
  last_now_ = now;
  return Status::OK();
}

Result<std::vector<Action>> Controller::Handle(const Event& event, Time now) {
  BULWARK_RETURN_IF_ERROR(Advance(now));
  std::vector<Action> actions;
  RuleContext ctx{state_, config_, now, actions};
  BULWARK_RETURN_IF_ERROR(Decide(ctx, ClampToNow(event, now)));
  return actions;
}

Result<std::vector<Action>> Controller::HandleAll(const std::vector<Event>& events, Time now,
                                                   std::vector<std::pair<size_t, Status>>* refused) {
  std::vector<Event> clamped = events;
  return HandleAllInPlace(clamped, now, refused);
}

Result<std::vector<Action>> Controller::HandleAllInPlace(std::vector<Event>& events, Time now,
                                                          std::vector<std::pair<size_t, Status>>* refused) {
  BULWARK_RETURN_IF_ERROR(Advance(now));
  for (Event& e : events) e = ClampToNow(std::move(e), now);
  std::vector<Action> actions;
  RuleContext ctx{state_, config_, now, actions};
  BULWARK_RETURN_IF_ERROR(DecideAll(ctx, events, refused));
  return actions;
}

Result<std::vector<Action>> Controller::Reconcile(Time now) {
  BULWARK_RETURN_IF_ERROR(Advance(now));
  std::vector<Action> actions;
  RuleContext ctx{state_, config_, now, actions};
  for (Action& a : controller::Reconcile(state_, config_, now)) {
    BULWARK_RETURN_IF_ERROR(Emit(ctx, std::move(a)));
  }
  return actions;
}

StandbyReport Controller::standby() const { return StandbyStatus(state_, config_); }

}  // namespace bulwark::controller
