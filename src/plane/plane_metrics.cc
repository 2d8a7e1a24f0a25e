// The plane's Prometheus metrics (GET /metrics, common/metrics_server.h):
// the same state `status`, `incidents` and `ledger` report, as families a
// Grafana dashboard can chart (config/grafana/bulwark.json). Everything is
// computed from the plane's state at scrape time, so a controller restarted
// from its journal serves the same ledger and incident figures.
#include <cmath>

#include "common/metrics_text.h"
#include "plane/plane.h"

namespace bulwark::plane {
namespace {

double Seconds(Duration d) { return ToMs(d) / 1000.0; }

// Detection takes seconds, recovery seconds to minutes (a standby swap, a
// wait for a machine): buckets from 100 ms to 10 min.
const std::vector<double> kDurationBuckets = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};

void LedgerFamilies(MetricsText& m, const std::string& job, const TimeBreakdown& cumulative, const TimeBreakdown& window,
            Duration window_len) {
  m.Family("bulwark_job_ettr_ratio", "gauge",
           "Effective training time ratio: productive time / wall time, since the job started (scope=cumulative) "
           "or over the sliding window (scope=window).");
  m.Sample("bulwark_job_ettr_ratio", {{"job", job}, {"scope", "cumulative"}}, cumulative.ettr());
  m.Sample("bulwark_job_ettr_ratio", {{"job", job}, {"scope", "window"}}, window.ettr());
  m.Family("bulwark_job_ettr_window_seconds", "gauge", "Length of the ETTR sliding window.");
  m.Sample("bulwark_job_ettr_window_seconds", {{"job", job}}, Seconds(window_len));
  m.Family("bulwark_job_wall_seconds_total", "counter", "Wall time of the job since it started.");
  m.Sample("bulwark_job_wall_seconds_total", {{"job", job}}, Seconds(cumulative.wall));
  m.Family("bulwark_job_time_seconds_total", "counter",
           "The job's wall time by ledger category (productive, startup, detection, localization, recovery, "
           "recomputation, waiting, manual).");
  for (int c = 0; c < kNumTimeCategories; ++c) {
    const auto cat = static_cast<TimeCategory>(c);
    m.Sample("bulwark_job_time_seconds_total", {{"job", job}, {"category", TimeCategoryName(cat)}},
             Seconds(cumulative.of(cat)));
  }
  m.Family("bulwark_job_window_time_seconds", "gauge", "The job's time by ledger category within the sliding window.");
  for (int c = 0; c < kNumTimeCategories; ++c) {
    const auto cat = static_cast<TimeCategory>(c);
    m.Sample("bulwark_job_window_time_seconds", {{"job", job}, {"category", TimeCategoryName(cat)}},
             Seconds(window.of(cat)));
  }
}

void IncidentFamilies(MetricsText& m, const std::vector<Incident>& all) {
  // A gauge, not a counter: an open incident's resolution still changes
  // (reattempt, then evicted_and_replaced), moving it between series.
  m.Family("bulwark_incidents", "gauge", "Incidents of the job by class and current resolution.");
  for (auto cls : {IncidentClass::kExplicit, IncidentClass::kImplicit, IncidentClass::kManual}) {
    for (auto res : {Resolution::kOpen, Resolution::kReattempt, Resolution::kEvictedAndReplaced, Resolution::kWaiting,
                     Resolution::kStopped}) {
      double n = 0;
      for (const Incident& i : all) n += i.cls == cls && i.resolution == res;
      m.Sample("bulwark_incidents", {{"class", IncidentClassName(cls)}, {"resolution", ResolutionName(res)}}, n);
    }
  }
  double evicted = 0, lost = 0;
  std::vector<double> detect, localize, recover;
  for (const Incident& i : all) {
    evicted += i.evicted.size();
    if (auto l = i.LostSteps()) lost += static_cast<double>(*l);
    detect.push_back(Seconds(i.DetectDuration()));
    if (auto d = i.LocalizeDuration()) localize.push_back(Seconds(*d));
    if (auto d = i.RecoverDuration()) recover.push_back(Seconds(*d));
  }
  m.Family("bulwark_incidents_total", "counter", "Incidents opened since the job started.");
  m.Sample("bulwark_incidents_total", {}, static_cast<double>(all.size()));
  m.Family("bulwark_evictions_total", "counter", "Machines evicted by incidents.");
  m.Sample("bulwark_evictions_total", {}, evicted);
  m.Family("bulwark_lost_steps_total", "counter", "Steps that had to be computed again after faults.");
  m.Sample("bulwark_lost_steps_total", {}, lost);
  m.Histogram("bulwark_incident_detect_seconds", "Fault to controller notified, per incident (0 when the fault time is unknown).",
              kDurationBuckets, detect);
  m.Histogram("bulwark_incident_localize_seconds", "Controller notified to culprit named, per localized incident.",
              kDurationBuckets, localize);
  m.Histogram("bulwark_incident_recover_seconds", "Restart decided to first step after it, per recovered incident.",
              kDurationBuckets, recover);
}

}  // namespace

void Plane::set_metrics_url(std::string url) {
  PlaneLock lock(this);
  metrics_url_ = std::move(url);
}

std::string Plane::Metrics(Time now) {
  PlaneLock lock(this);
  now = NowLocked(now);
  MetricsText m;
  m.Family("bulwark_controller_uptime_seconds", "gauge", "Seconds since this controller process started.");
  m.Sample("bulwark_controller_uptime_seconds", {}, Seconds(now - started_));
  m.Family("bulwark_controller_journal_ok", "gauge", "0 once the journal failed and the controller decides nothing more.");
  m.Sample("bulwark_controller_journal_ok", {}, journal_error_.ok() ? 1 : 0);

  m.Family("bulwark_machine_heartbeat_age_seconds", "gauge", "Seconds since the machine's agent last reported.");
  for (const auto& [id, a] : agents_) m.Sample("bulwark_machine_heartbeat_age_seconds", {{"machine", id}}, Seconds(now - LastHeardLocked(id)));
  m.Family("bulwark_machine_live_ranks", "gauge", "Ranks running on the machine, as its agent last reported.");
  for (const auto& [id, a] : agents_) m.Sample("bulwark_machine_live_ranks", {{"machine", id}}, static_cast<double>(a.live_ranks.size()));
  m.Family("bulwark_machine_state", "gauge", "1 for the machine's current state (joining, standby, active, diagnosing, evicted).");
  for (const auto& [id, a] : agents_) {
    const MachineStatus* s = controller_ ? controller_->state().FindMachine(id) : nullptr;
    m.Sample("bulwark_machine_state", {{"machine", id}, {"state", s ? MachineStateName(s->state) : "registered"}}, 1);
  }
  if (!controller_) return m.text();  // no job yet: the fleet is all there is

  const ClusterState& s = controller_->state();
  const std::string job = launch_->spec.id;
  const std::string state = done_step_ ? "completed" : JobStateName(s.job);
  m.Family("bulwark_job_state", "gauge", "1 for the job's current state (pending, restarting, running, waiting for machines, stopped, completed).");
  m.Sample("bulwark_job_state", {{"job", job}, {"state", state}}, 1);
  m.Family("bulwark_job_step", "gauge",
           "The newest step the job completed (falls back after a restore; deriv() of it is steps per second).");
  m.Sample("bulwark_job_step", {{"job", job}}, static_cast<double>(s.last_step));
  m.Family("bulwark_job_tokens_per_second", "gauge",
           "Tokens the job processes per second of stepping, over its last reports (0 until its ranks report tokens).");
  m.Sample("bulwark_job_tokens_per_second", {{"job", job}}, throughput_.tokens_per_s());
  m.Family("bulwark_job_tokens_total", "counter",
           "Tokens the job processed, recomputed steps included; rate() of it stalls with the job.");
  m.Sample("bulwark_job_tokens_total", {{"job", job}}, static_cast<double>(throughput_.total()));
  m.Family("bulwark_job_generation", "gauge", "How many times the job's ranks were (re)started.");
  m.Sample("bulwark_job_generation", {{"job", job}}, static_cast<double>(s.placement.generation));
  m.Family("bulwark_job_world_size", "gauge", "Ranks in the job.");
  m.Sample("bulwark_job_world_size", {{"job", job}}, launch_->spec.world_size);
  m.Family("bulwark_job_hang_allowance_seconds", "gauge", "How long the hang detector now waits for the next step.");
  m.Sample("bulwark_job_hang_allowance_seconds", {{"job", job}}, Seconds(monitors_->hang_allowance()));
  LedgerFamilies(m, job, controller_->Cumulative(now), controller_->Window(now), s.ledger.window());
  IncidentFamilies(m, controller_->incidents());

  const StandbyReport r = controller_->standby();
  m.Family("bulwark_standby_target", "gauge", "Standby machines the pool should hold (Binomial quantile of daily evictions).");
  m.Sample("bulwark_standby_target", {}, r.target);
  m.Family("bulwark_standby_available", "gauge", "Standby machines ready to replace an evicted one.");
  m.Sample("bulwark_standby_available", {}, r.available);
  return m.text();
}

}  // namespace bulwark::plane
