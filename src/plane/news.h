// News: which of the agents' calls go ahead of the heartbeats waiting in
// the service's queue (workers.h). A call with news is one the controller
// decides on: a rank's exit, a diagnosis, an answer to a request, and a
// hang's stacks. A heartbeat only says the agent is alive and where its
// ranks are, and its lateness costs nothing until the lease.
#pragma once

#include "bulwark.pb.h"

namespace bulwark::plane {

// A report with an event other than rank 0's STEP.
inline bool HasNews(const wire::ReportRequest& req) {
  for (const wire::AgentEvent& e : req.events()) {
    if (e.kind() != wire::AgentEvent::STEP) return true;
  }
  return false;
}

// Always: the hang's verdict waits for the stacks of every machine asked
// (plane_traces.cc), and behind heartbeats they came late (issue 36: at
// 12,500 agents in 100 jobs the verdict took 2.53 s after suspicion, where
// 1,000 agents took 0.10 s).
inline bool HasNews(const wire::StacksRequest&) { return true; }

}  // namespace bulwark::plane
