// AnomalyDetector: non-finite values and loss or grad-norm spikes.
//
// ByteRobust's rule: NaN, or a jump above 5x the rolling median, is a fault
// signal. What matters next is whether one machine caused it. Every rank
// reports its *local* gradient norm from before the all-reduce; after the
// all-reduce a single bad GPU's NaN is everyone's NaN, but before it only
// the culprit's is. So on an anomalous step the detector waits (at most
// anomaly_wait) for every rank's report of that step, then names the ranks
// whose local values were non-finite (or spiked) while the others' were
// not. None stands out: the anomaly is the job's, and the policy reattempts
// from the checkpoint before it. Pure: fed signals and `now`.
#pragma once

#include <deque>
#include <vector>
#include <map>
#include <optional>

#include "common/spike_rule.h"
#include "controller/event.h"
#include "controller/policy_config.h"
#include "controller/signals.h"

namespace bulwark::controller {

class AnomalyDetector {
 public:
  explicit AnomalyDetector(const PolicyConfig& config)
      : config_(config), loss_(config.spike_window), grad_norm_(config.spike_window) {}

  // Ranks were (re)started with `world` ranks: pending anomalies belonged to
  // the old run. The rolling history is the job's and is kept, less the
  // steps the new run redoes (from the first step it reports).
  void Started(Time now, int world);
  void Stop() { armed_ = false; }
  void Observe(const RankSignal& s);
  // A TrainingAnomaly once every rank reported the anomalous step, or
  // anomaly_wait after the first report of it.
  std::optional<TrainingAnomaly> Check(Time now);

  // The rule (common/spike_rule.h), for one value against its history:
  // non-finite, or above factor x the median once min_history values are
  // known.
  static bool IsSpike(double value, const std::deque<double>& history, double factor, int min_history);

 private:
  struct Pending {
    Time first_seen{};
    std::string kind;  // "nan" or "spike"
    std::map<int, RankSignal> reports;  // by rank
  };
  void Remember(const RankSignal& s);
  void Rewind(int64_t first);

  const PolicyConfig& config_;
  bool armed_ = false;
  bool rewind_ = false;  // the first report after Started names the restored step
  int world_ = 0;
  int64_t history_step_ = 0;  // newest step in the history
  // Kept sorted beside the step order: the median is one read, with no copy
  // and partition per report (a simulated 100k-GPU year spent 14% of its
  // time in that).
  SpikeHistory loss_, grad_norm_;
  std::deque<int64_t> steps_;  // their steps, oldest first
  std::map<int64_t, Pending> pending_;  // by step
  // Ordinary reports of recent steps, by step, in arrival order: read only
  // when another rank reports that step anomalous, so they are appended,
  // not sorted in (a tree node per rank and step was 2-3% of the
  // controller's CPU at 12,500 agents, issue 36).
  std::map<int64_t, std::vector<RankSignal>> recent_;
  int64_t reported_ = 0;  // anomalies at or below this step were reported
};

}  // namespace bulwark::controller
