// Trace collection: the agents' answers to a TRACE command gathered into
// one verdict for the policy (stack_analyzer.h), and the raw stacks kept for
// people under DIR/stacks/incident-N/.
#include <fstream>

#include "common/files.h"
#include "plane/codec.h"
#include "plane/plane.h"

namespace bulwark::plane {
namespace {

// Each rank's stack in a file of its own, then the analysis (atomically: a
// reader that finds it finds every rank's file). Plain writes: these are
// for people, and a crash only loses them.
Status WriteRawStacks(const std::string& dir, const std::vector<RankStack>& stacks, const std::string& analysis) {
  BULWARK_RETURN_IF_ERROR(MakeDirs(dir));
  for (const RankStack& s : stacks) {
    std::ofstream f(dir + "/rank-" + std::to_string(s.rank) + ".txt", std::ios::trunc);
    f << "# rank " << s.rank << " on " << s.machine << "\n" << (s.text.empty() ? "# no stack: " + s.error + "\n" : s.text);
    if (!f) return Status::Internal("cannot write " + dir + "/rank-" + std::to_string(s.rank) + ".txt");
  }
  return WriteFileAtomic(dir + "/analysis.json", analysis);
}

}  // namespace

Status Plane::UploadStacks(const wire::StacksRequest& req, Time now) {
  PlaneLock lock(this);
  now = NowLocked(now);
  if (!trace_ || req.trace() != trace_->id) {
    LogLocked("stacks from " + req.machine() + " for " + req.trace() + " arrived after their trace ended; kept out");
    return Status::OK();
  }
  if (trace_->waiting.erase(req.machine()) == 0) return Status::OK();  // a resend
  LogLocked("stacks of " + std::to_string(req.stacks_size()) + " rank(s) from " + req.machine() + " for " + req.trace());
  for (const wire::RankStack& r : req.stacks()) {
    trace_->stacks.push_back({r.rank(), req.machine(), r.text(), r.error()});
    if (!r.error().empty()) LogLocked("no stack of rank " + std::to_string(r.rank()) + " on " + req.machine() + ": " + r.error());
  }
  if (trace_->waiting.empty()) FinishTraceLocked(now);
  return Status::OK();
}

void Plane::FinishTraceLocked(Time now) {
  Trace t = std::move(*trace_);
  trace_.reset();
  // A large capture asked every machine for its stacks at once, and their
  // uploads crowded the controller's sockets: at 12,500 agents four
  // machines' reports, sent, waited behind 12,499 uploads past the 2 s
  // lease and the machines were evicted, healthy (issue 36's bench). Its
  // time is not counted as anyone's silence, as a stall of this process is
  // not (Tick); a machine that really went silent is lost that much later,
  // the capture's deadline at most (PlaneOptions::capture_crowds).
  if (t.crowds) CreditSilenceLocked(now, now - t.started);
  if (!controller_) return;
  std::map<int, MachineId> machine_of;
  for (int r = 0; r < t.placement.world_size(); ++r) machine_of[r] = t.placement.MachineOf(r);
  Topology topo = controller_->state().spec.topology();
  topo.world = t.placement.world_size();
  const StackAnalysis an = AnalyzeStacks(t.stacks, topo, machine_of);

  StacksAnalyzed e;
  e.incident = t.incident;
  e.generation = t.placement.generation;
  for (const StackGroup& g : an.groups) {
    e.groups.push_back({static_cast<int>(g.ranks.size()), SummarizeFrames(g.frames), g.ranks});
  }
  e.missing = an.missing;
  e.group = an.group ? an.group->Name() : "";
  e.suspects = an.suspects;
  e.why = an.why;
  if (!t.waiting.empty()) {
    std::string silent;
    for (const MachineId& m : t.waiting) silent += (silent.empty() ? "" : ", ") + m;
    e.why += "; no answer from " + silent + " within " + FormatDuration(options_.policy.trace_deadline);
  }
  e.observed = now;

  // The raw stacks, for people: DIR/stacks/incident-N/rank-R.txt. The
  // verdict goes to the policy whether they are written or not, so they are
  // written once the lock is released (one fsync per rank's file held it
  // 26 s at 4,000 ranks: issue 36), as plain files, the analysis last.
  const size_t slash = options_.db_path.find_last_of('/');
  const std::string dir = (slash == std::string::npos ? std::string(".") : options_.db_path.substr(0, slash)) +
                          "/stacks/incident-" + std::to_string(t.incident);
  deferred_.push_back([this, dir, incident = t.incident, stacks = std::move(t.stacks),
                       analysis = EncodeEvent(Event(e)).dump(2) + "\n"] {
    Status written = WriteRawStacks(dir, stacks, analysis);
    if (!written.ok()) log_.Info("raw stacks of incident " + std::to_string(incident) + " not kept: " + written.ToString());
  });
  LogLocked("stacks of incident " + std::to_string(t.incident) + ": " + e.why + " (raw stacks in " + dir + ")");
  FeedLocked(Event(e), now, nullptr);
}

}  // namespace bulwark::plane
