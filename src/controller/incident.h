// Incidents: one fault episode each, from its first symptom to training
// resumed (or given up on), with the timings ETTR is made of.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "controller/event.h"
#include "controller/machine.h"
#include "controller/time.h"

namespace bulwark::controller {

// Explicit: a clear indicator (exit code, log signature, failed inspection,
// lost machine). Implicit: no indicator (hang, slowdown, NaN). Manual: an
// operator restarted the job.
enum class IncidentClass { kExplicit, kImplicit, kManual };

// How the episode was (or is being) handled; the latest decision wins, so an
// incident that first reattempted and then evicted reads kEvictedAndReplaced.
enum class Resolution {
  kOpen,                // detected, nothing decided yet
  kReattempt,           // restart in place on the same machines
  kEvictedAndReplaced,  // bad machines out, standbys in, restart
  kWaiting,             // machines evicted and no standby: the job waits
  kStopped,             // the policy gave up; a human must act
  kUpdated,             // a release applied in place (hot update)
  kRolledBack,          // back to an earlier release after a crash that followed an update
  kRequeued,            // requeue mode: every rank stopped, machines reacquired cold
};

const char* IncidentClassName(IncidentClass c);
const char* ResolutionName(Resolution r);

// One rung of the stop-time ladder climbed for this incident: when it
// started and ended and what it found ("m03: compute failed: ...",
// "no earlier release", "culprit m13 (h3 x v1)").
struct RungRecord {
  std::string rung;
  Time started{};
  std::optional<Time> ended;
  std::string outcome;
};

struct Incident {
  int64_t id = 0;
  IncidentClass cls = IncidentClass::kExplicit;
  std::string cause;                // first symptom, then any later ones ("; then ...")
  std::vector<MachineId> evicted;   // in eviction order
  Resolution resolution = Resolution::kOpen;
  std::string why;                  // the policy's reason for its latest decision

  std::optional<Time> fault;        // when it happened, if the event said
  Time detected{};                  // when the controller learned of it
  std::optional<Time> localized;    // when the culprit (or "software") was named
  std::optional<Time> decision;     // first recovery decision: restart, wait or stop
  std::optional<Time> recovered;    // first StepCompleted after the restart
  std::optional<Time> waiting_since;  // set while the job waits for machines
  Duration waited{0};               // total time spent waiting for machines

  int64_t step_at_fault = 0;              // last step completed before the fault
  std::optional<int64_t> restored_step;   // checkpoint the job resumed from
  // Set by the ranks' RESTORED report: where the slowest rank's shard came
  // from ("memory", "peer", "durable", "disk") and how long its restore
  // took. Without one, restored_step is inferred from the first step.
  std::string restore_source;
  std::optional<double> restore_ms;
  bool closed = false;                    // recovered or stopped
  // A domain's loss (policy_domains.cc): the domain, and how many of its
  // machines the burst took. Empty domain: a machine's own fault.
  std::string domain;
  int domain_lost = 0;

  // Elastic jobs (controller/job.h): the ranks its restart left training,
  // when fewer than the job has, and when the job next completed a step at
  // full width (a machine rejoined): the degraded interval is
  // [recovered, rejoined). Unset rejoined: still narrower.
  std::optional<int> trained_on;
  std::optional<Time> rejoined;

  // Implicit incidents: the stack groups the analyzer found and what it
  // chose (empty when no stacks were taken), and notes on the way (a
  // job-wide slowdown, a trace that came back incomplete).
  StacksAnalyzed stacks;
  std::vector<std::string> notes;
  // The ladder's rungs, in the order climbed (ladder.h).
  std::vector<RungRecord> rungs;

  // detected - fault; zero when the fault time is unknown.
  Duration DetectDuration() const;
  // localized - detected.
  std::optional<Duration> LocalizeDuration() const;
  // recovered - decision, including any wait for machines (see `waited`).
  std::optional<Duration> RecoverDuration() const;
  // step_at_fault - restored_step: steps that must be computed again.
  std::optional<int64_t> LostSteps() const;
  // recovered - fault (detected when the fault time is unknown): how long
  // the job made no progress, for an elastic job the survivors' stall.
  std::optional<Duration> StallDuration() const;
  // One line: "incident 3 (explicit, evicted_and_replaced): <cause>; evicted m02; <why>".
  std::string Summary() const;
};

// The incidents of one job, oldest first, and at most one open at a time:
// faults that arrive before the job recovers belong to the same episode.
class IncidentLog {
 public:
  // The open incident, or nullptr.
  Incident* Current();
  const Incident* Current() const;
  // Opens an incident, or joins the open one (appending `cause`). Ids start at 1.
  Incident& OpenOrJoin(IncidentClass cls, const std::string& cause, std::optional<Time> fault,
                       Time detected, int64_t step_at_fault);
  // The newest incident, open or closed, or nullptr: late reports about a
  // recovery (what was restored) still belong to it.
  Incident* Last() { return incidents_.empty() ? nullptr : &incidents_.back(); }
  const std::vector<Incident>& all() const { return incidents_; }
  // A step at full width at `t`: every incident that left the job
  // narrower has its rejoin.
  void Rejoined(Time t);
  const Incident* Find(int64_t id) const;

 private:
  std::vector<Incident> incidents_;
  // Incidents before this one are rejoined or never narrowed the job: only
  // the open incident (the newest) is given trained_on, so each rejoin
  // looks at the incidents since the last, not at a year's 19,000.
  size_t rejoin_from_ = 0;
};

}  // namespace bulwark::controller
