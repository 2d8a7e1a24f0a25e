// What a test agent says to a Plane: registrations, reports and events as
// the real agent sends them (incarnation 7). Shared by the plane's unit tests.
#pragma once

#include <string>
#include <vector>

#include "bulwark.pb.h"

namespace bulwark::testing {

inline wire::RegisterRequest Reg(const std::string& m) {
  wire::RegisterRequest r;
  r.set_machine(m);
  r.set_machine_dir("/tmp/" + m);
  r.set_incarnation(7);
  return r;
}

inline wire::ReportRequest Report(const std::string& m, std::vector<wire::AgentEvent> events) {
  wire::ReportRequest r;
  r.set_machine(m);
  r.set_incarnation(7);
  for (auto& e : events) *r.add_events() = e;
  return r;
}

inline wire::AgentEvent Step(int64_t seq, int64_t step, int64_t gen, int64_t at_ms) {
  wire::AgentEvent e;
  e.set_kind(wire::AgentEvent::STEP);
  e.set_seq(seq);
  e.set_step(step);
  e.set_generation(gen);
  e.set_observed_ms(at_ms);
  return e;
}

inline wire::AgentEvent DeviceFailed(int64_t seq, int64_t at_ms) {
  wire::AgentEvent e;
  e.set_kind(wire::AgentEvent::INSPECTION_FAILED);
  e.set_seq(seq);
  e.set_inspection("device");
  e.set_detail("Xid 48");
  e.set_observed_ms(at_ms);
  return e;
}

// A rank's report that it restored `step` from `source` (a restart's
// checkpoint restore), `newest` being the newest step any copy held.
inline wire::AgentEvent RestoredEvent(int64_t seq, int64_t step, const std::string& source, int64_t newest,
                                      int64_t gen, int64_t at_ms) {
  wire::AgentEvent e;
  e.set_kind(wire::AgentEvent::RESTORED);
  e.set_seq(seq);
  e.set_step(step);
  e.set_source(source);
  e.set_newest_step(newest);
  e.set_restore_ms(750.5);
  e.set_generation(gen);
  e.set_observed_ms(at_ms);
  return e;
}

}  // namespace bulwark::testing
