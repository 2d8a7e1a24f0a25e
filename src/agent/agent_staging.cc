// Staged releases: before a hot update restarts the job, the agent sets up
// processes of the new release beside the ranks that train on (libtorch
// loaded, model built, data opened, blocked until told their rank), and says
// so. The restart then hands each rank to one of them (handoff.h), as it
// does with the spares of a crashed rank: a rendezvous and a restore from
// memory instead of a cold start. The controller waits for every machine's
// answer, or its deadline (controller/releases.h).
#include "agent/agent_impl.h"

namespace bulwark::agent::detail {

void Agent::Stage(const wire::Command& c) {
  if (staging_ && staging_->id == c.id()) return;  // resent after a reconnect
  Staging st;
  st.id = c.id();
  st.release = c.release();
  st.spec = SpecFrom(c);
  st.identity = Supervisor::Identity(st.spec);
  st.want = static_cast<size_t>(std::max(1, c.local_world_size()));
  st.since = Now();
  staging_ = std::move(st);
  const std::string program = staging_->spec.argv.empty()
                                  ? std::string()
                                  : staging_->spec.argv[0].substr(staging_->spec.argv[0].rfind('/') + 1);
  // Only a program that waits for an ASSIGN can be set up ahead; any other
  // would run the whole job on its own.
  if (program != "bulwark-train") {
    ReportStaged(false, "'" + program + "' does not wait to be told its rank: its ranks start cold");
    return;
  }
  // Keep the running job's spares (a crash before the restart still gets
  // one) and any of this release already set up.
  std::set<std::string> keep{staging_->identity};
  if (spare_spec_) keep.insert(Supervisor::Identity(*spare_spec_));
  supervisor_.StopSpares(keep);
  Log("staging release " + std::to_string(staging_->release) + ": setting up " + std::to_string(staging_->want) +
      " process(es) beside the running ranks");
  MaybeReportStaged();
}

void Agent::MaybeReportStaged() {
  if (!staging_ || staging_->reported) return;
  Staging& st = *staging_;
  if (supervisor_.WaitingSpareCount(st.identity) >= st.want) {
    const double s = std::chrono::duration<double>(Now() - st.since).count();
    char took[32];
    std::snprintf(took, sizeof took, "%.2f s", s);
    ReportStaged(true, std::to_string(st.want) + " process(es) set up and waiting in " + took);
    return;
  }
  if (supervisor_.SpareCount(st.identity) >= st.want) return;  // still setting up
  // One per local rank, and a second try each: a release that cannot set up
  // here (a bad flag, a missing file) is not retried forever; its restart
  // starts cold and shows the error in the rank's log.
  if (st.started >= 2 * st.want) {
    ReportStaged(false, "a process of release " + std::to_string(st.release) +
                            " exited while setting up (see spare.log in the machine's ranks folder)");
    return;
  }
  ++st.started;
  if (Status s = supervisor_.Prespawn(st.spec); !s.ok()) {
    ReportStaged(false, "cannot start a process of release " + std::to_string(st.release) + ": " + s.ToString());
  }
}

void Agent::ReportStaged(bool staged, const std::string& detail) {
  staging_->reported = true;
  Log(std::string(staged ? "staged" : "cannot stage") + " release " + std::to_string(staging_->release) + ": " +
      detail);
  wire::AgentEvent e;
  e.set_kind(wire::AgentEvent::RELEASE_STAGED);
  e.set_release(staging_->release);
  e.set_staged(staged);
  e.set_detail(detail);
  Emit(std::move(e));
}

}  // namespace bulwark::agent::detail
