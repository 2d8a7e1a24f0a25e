// FailSlowDetector: one machine dragging every step (ByteRobust's MFU decline).
//
// In a synchronous job the slow machine computes longer and every other
// machine waits longer in the all-reduce, so the step time alone cannot say
// who is slow; each machine's own compute time can (its device time where
// the ranks report it: common/step_signal.h). Every slow_round the
// detector compares each machine's mean compute time per step with the
// median of the others' and reports the most outlying one once it was the
// most outlying slow_rounds rounds running and the median of its ratios
// over those rounds is slow_ratio or more. Another machine standing out
// most starts the count again; a round under the threshold does not. A
// machine mildly slow for long is found by its own ratios: their median
// over the last slow_long_rounds rounds at least slow_long_ratio (CheckMild).
// A job whose every machine slowed down together (a slower data
// shard, a noisy host) has no outlier: it is reported once as job-wide and
// evicts nothing. A job whose steps slowed while every machine computes
// as fast as before is waiting on its network: that is reported for the
// links to be measured (CheckLinks). Pure: fed signals and `now`.
//
// Pipeline stages do different work (the first embeds, the last computes
// the head and the loss), so a machine is compared only with machines
// running the same stage: its cohort. A stage held by one machine alone has
// no one to be compared with and is never flagged.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "controller/event.h"
#include "controller/policy_config.h"
#include "controller/signals.h"
#include "controller/topology.h"

namespace bulwark::controller {

class FailSlowDetector {
 public:
  explicit FailSlowDetector(const PolicyConfig& config) : config_(config) {}

  // Ranks were (re)started: rounds start again (a new machine, new numbers).
  // `layout` gives each rank its stage (its cohort); a default layout (PP 1)
  // puts every machine in one cohort.
  void Started(Time now, const Topology& layout = {});
  void Stop() { armed_ = false; }
  void Observe(const RankSignal& s);
  // At each round's end: a FailSlowSuspected for a machine flagged
  // slow_rounds running, or a job-wide slowdown (machine empty), else nothing.
  std::optional<FailSlowSuspected> Check(Time now);

  // The last round's verdict, for status: "m03 computes 2.10x the others' time per step, 2.08x over 3/5 rounds".
  const std::string& last_round() const { return last_round_; }
  // The largest median of any machine's last slow_long_rounds ratios that
  // flagged nobody: how close a fault-free job came to slow_long_ratio.
  double max_unflagged_long() const { return max_unflagged_long_; }
  // The largest worst-machine ratio of any round that flagged nobody: how
  // close a fault-free job came to the threshold.
  double max_unflagged_ratio() const { return max_unflagged_; }

 private:
  struct Sums {
    double compute_ms = 0, step_ms = 0;
    double device_ms = 0;  // summed over the steps that reported it
    int steps = 0, device_steps = 0;
  };
  // A slowdown of the steps while compute holds: the network (a slowed
  // link), reported with network set once it lasts slow_rounds rounds (the
  // medians of the last slow_rounds rounds).
  std::optional<FailSlowSuspected> CheckLinks(Time now, const std::vector<double>& step_means, double compute_median);
  // Each machine's ratio this round into its history; the machine whose
  // median over a full history is the largest and at least slow_long_ratio.
  std::optional<FailSlowSuspected> CheckMild(Time now);
  // A machine's ranks of one stage: (stage, machine).
  using Key = std::pair<int, MachineId>;
  const PolicyConfig& config_;
  bool armed_ = false;
  Topology layout_;
  Time round_start_{};
  std::map<Key, Sums> round_;
  MachineId flagged_;           // the most outlying machine, rounds running
  std::deque<double> ratios_;   // its ratios in those rounds, the last slow_rounds
  std::map<Key, std::deque<double>> history_;  // every machine's ratios, the last slow_long_rounds
  std::optional<double> best_median_;  // the job's fastest round so far
  bool jobwide_reported_ = false;
  std::optional<double> best_step_median_;  // the job's fastest steps, for CheckLinks
  struct LinkRound {
    double ratio = 0, compute_share = 0;  // steps against the best; compute's share of the added time
  };
  std::deque<LinkRound> links_;  // the last slow_rounds rounds, for CheckLinks
  int link_rounds_ = 0;          // rounds since the steps slowed
  bool link_reported_ = false;
  std::string last_round_;
  double max_unflagged_ = 0;
  double max_unflagged_long_ = 0;
};

}  // namespace bulwark::controller
