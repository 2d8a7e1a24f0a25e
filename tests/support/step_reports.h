// A test agent's report of one rank's finished step, as the rank link sums
// it into a RankSignal: shared by the plane's unit tests that drive the
// implicit-fault detectors through Plane::Report.
#pragma once

#include <string>

#include "support/agent_messages.h"

namespace bulwark::testing {

// Rank `rank` of generation `gen` finished step `step` at `at_ms`, taking
// `step_ms` (80% compute, 20% communication) with a steady loss.
inline wire::ReportRequest StepReport(const std::string& m, int rank, int64_t step, int64_t gen, int64_t at_ms,
                                      double step_ms) {
  wire::ReportRequest r = Report(m, {});
  wire::RankSignal* s = r.add_signals();
  s->set_rank(rank);
  s->set_step(step);
  s->set_steps(1);
  s->set_loss(2.0);
  s->set_grad_norm(1.0);
  s->set_local_grad_norm(1.0);
  s->set_step_ms(step_ms);
  s->set_compute_ms(step_ms * 0.8);
  s->set_comm_ms(step_ms * 0.2);
  s->set_observed_ms(at_ms);
  s->set_generation(gen);
  return r;
}

}  // namespace bulwark::testing
