#include "controller/fail_slow_detector.h"

#include <algorithm>
#include <cstdio>

namespace bulwark::controller {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The median of `sorted` (ascending) less its element at `skip`: what
// Median of the other values gives, read off one sorted copy by index.
double MedianWithout(const std::vector<double>& sorted, size_t skip) {
  const size_t n = sorted.size() - 1;  // the others
  auto at = [&](size_t k) { return sorted[k < skip ? k : k + 1]; };
  return n % 2 ? at(n / 2) : (at(n / 2 - 1) + at(n / 2)) / 2;
}

std::string Ratio(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", r);
  return buf;
}

}  // namespace

void FailSlowDetector::Started(Time now, const Topology& layout) {
  armed_ = true;
  layout_ = layout;
  round_start_ = now;
  round_.clear();
  flagged_.clear();
  ratios_.clear();
  history_.clear();  // new machines, or the same in new places
  jobwide_reported_ = false;
  // The best median is kept: a restart onto the same hardware does not make
  // the job's normal speed unknown again.
}

void FailSlowDetector::Observe(const RankSignal& s) {
  if (!armed_ || !s.halted.empty() || s.steps <= 0) return;
  const int stage = layout_.pp > 1 && layout_.world > 0 && s.rank < layout_.world ? layout_.Of(s.rank).pp : 0;
  Sums& m = round_[{stage, s.machine}];
  m.compute_ms += s.compute_ms;
  m.step_ms += s.step_ms;
  m.steps += s.steps;
  if (s.device_ms > 0) {
    m.device_ms += s.device_ms;
    m.device_steps += s.steps;
  }
}

std::optional<FailSlowSuspected> FailSlowDetector::Check(Time now) {
  if (!armed_ || now - round_start_ < config_.slow_round) return std::nullopt;
  // A round lasts until every machine has slow_min_steps steps in it, up to
  // ten rounds' time: a 5 s step never fits 3 steps in a 10 s round, and
  // without this a large model's slow machine was never compared at all
  // (found by the simulator once it drove this detector).
  const bool short_of_steps = std::any_of(round_.begin(), round_.end(), [&](const auto& kv) {
    return kv.second.steps < config_.slow_min_steps;
  });
  if (short_of_steps && now - round_start_ < config_.slow_round * 10) return std::nullopt;
  std::map<Key, Sums> round;
  round.swap(round_);
  round_start_ = now;

  // Machines are compared by their compute's device time where every one
  // of them reported it for every step (common/step_signal.h: local machines share
  // cores, and a rank waiting for one is not a slow machine), else by its
  // wall time. The job against its own best, and its links, by wall time:
  // a loaded host slows the steps with their compute's wall time, a slowed
  // link without it.
  const bool by_device = std::all_of(round.begin(), round.end(), [](const auto& kv) {
    return kv.second.steps > 0 && kv.second.device_steps == kv.second.steps;
  });
  std::vector<std::pair<Key, double>> mean;
  std::vector<double> step_means, wall;
  for (const auto& [k, s] : round) {
    if (s.steps < config_.slow_min_steps) continue;
    mean.emplace_back(k, (by_device ? s.device_ms : s.compute_ms) / s.steps);
    wall.push_back(s.compute_ms / s.steps);
    step_means.push_back(s.step_ms / s.steps);
  }
  // A round some machine barely took part in (a restart, a stall) says nothing.
  if (mean.size() < 2 || mean.size() < round.size()) {
    last_round_ = "too few steps this round to compare machines";
    return std::nullopt;
  }
  const double median = Median(wall);

  // The most outlying machine against the median of the others in its
  // stage. Each stage's means are sorted once and each machine's others'
  // median read off them by index: a copy and a sort per machine was
  // O(M^2 log M), 1.9 s under the controller's lock at 12,500 machines
  // every round, which every report waited out (issue 36).
  std::map<int, std::vector<double>> stage_sorted;
  for (const auto& [k, v] : mean) stage_sorted[k.first].push_back(v);
  for (auto& [stage, v] : stage_sorted) std::sort(v.begin(), v.end());
  MachineId worst;
  double worst_ratio = 0;
  for (size_t i = 0; i < mean.size(); ++i) {
    const std::vector<double>& sorted = stage_sorted[mean[i].first.first];
    if (sorted.size() < 2) continue;  // no others in its stage
    // Any element equal to its mean stands for it: the rest are the same values.
    const size_t at = std::lower_bound(sorted.begin(), sorted.end(), mean[i].second) - sorted.begin();
    const double base = MedianWithout(sorted, at);
    const double ratio = base > 0 ? mean[i].second / base : 0;
    if (config_.slow_long_ratio > 0) {
      std::deque<double>& h = history_[mean[i].first];
      h.push_back(ratio);
      if (static_cast<int>(h.size()) > config_.slow_long_rounds) h.pop_front();
    }
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = mean[i].first.second;
    }
  }

  // The evidence is the median of the worst machine's last slow_rounds
  // rounds, not each round alone: a machine near slow_ratio with a few
  // percent of noise dips under it every few rounds, and a streak that
  // every dip restarted never ended (a machine 1.30x slow slowed a
  // simulated 9,600-GPU job from day 22 to day 90). The median also ignores
  // a healthy machine's odd round over the threshold.
  if (worst != flagged_) {
    flagged_ = worst;
    ratios_.clear();
  }
  ratios_.push_back(worst_ratio);
  if (static_cast<int>(ratios_.size()) > config_.slow_rounds) ratios_.pop_front();
  const double typical = Median({ratios_.begin(), ratios_.end()});
  if (worst_ratio >= config_.slow_ratio || typical >= config_.slow_ratio) {
    link_rounds_ = 0;  // a machine stands out: not the links' rounds running
    const int rounds = static_cast<int>(ratios_.size());
    last_round_ = worst + " computes " + Ratio(worst_ratio) + " the others' time per step, " + Ratio(typical) +
                  " over " + std::to_string(rounds) + "/" + std::to_string(config_.slow_rounds) + " rounds";
    if (rounds < config_.slow_rounds || typical < config_.slow_ratio) return CheckMild(now);
    FailSlowSuspected f;
    f.machine = worst;
    f.rounds = rounds;
    f.ratio = typical;
    f.detail = last_round_;
    f.observed = now;
    ratios_.clear();
    return f;
  }
  max_unflagged_ = std::max(max_unflagged_, worst_ratio);
  if (std::optional<FailSlowSuspected> mild = CheckMild(now)) return mild;
  if (!best_median_ || median < *best_median_) best_median_ = median;
  const double jobwide = median / *best_median_;
  if (std::optional<FailSlowSuspected> link = CheckLinks(now, step_means, median)) return link;
  last_round_ = "no outlier (worst " + Ratio(worst_ratio) + "); job at " + Ratio(jobwide) + " its best round";
  if (jobwide >= config_.slow_jobwide_ratio && !jobwide_reported_) {
    jobwide_reported_ = true;
    FailSlowSuspected f;
    f.rounds = 1;
    f.ratio = jobwide;
    f.detail = "job-wide slowdown: every machine computes " + Ratio(jobwide) +
               " its best round's time per step, none stands out";
    f.observed = now;
    return f;
  }
  // Hysteresis: a job hovering at the threshold is one slowdown, not a
  // note every other round; it is news again once back near its best.
  if (jobwide < 1 + (config_.slow_jobwide_ratio - 1) / 2) jobwide_reported_ = false;
  return std::nullopt;
}

// A machine 1.15-1.3x slow is under slow_ratio in most rounds' noise and
// over it in a few: the short rule's median of five never reaches the
// threshold, and the machine slows every step for the rest of its job. Its
// own median over 30 rounds (5 min) is steady, as a healthy machine's is
// steady near 1. Only a full history counts: a machine judged on a few
// rounds would be the short rule again, with a lower threshold.
std::optional<FailSlowSuspected> FailSlowDetector::CheckMild(Time now) {
  if (config_.slow_long_ratio <= 0) return std::nullopt;
  const Key* worst = nullptr;
  double worst_median = 0;
  for (const auto& [k, h] : history_) {
    if (static_cast<int>(h.size()) < config_.slow_long_rounds) continue;
    const double m = Median({h.begin(), h.end()});
    if (m > worst_median) {
      worst_median = m;
      worst = &k;
    }
  }
  if (!worst || worst_median < config_.slow_long_ratio) {
    max_unflagged_long_ = std::max(max_unflagged_long_, worst_median);
    return std::nullopt;
  }
  FailSlowSuspected f;
  f.machine = worst->second;
  f.rounds = config_.slow_long_rounds;
  f.ratio = worst_median;
  f.detail = f.machine + " computes " + Ratio(worst_median) + " the others' time per step over " +
             std::to_string(f.rounds) + " rounds (mildly slow, under " + Ratio(config_.slow_ratio) + " a round)";
  f.observed = now;
  const Key gone = *worst;  // erased below: a copy, not a reference into the map
  history_.erase(gone);
  last_round_ = f.detail;
  return f;
}

// A slowed link slows every step alike (each all-reduce crosses it) while
// every machine computes as fast as ever, so no machine stands out and the
// compute-time comparison above cannot see it. Steps slow_link_ratio times
// the job's best, of which compute explains under a quarter of the added
// time, ask for the links to be measured. A loaded host slows compute with
// the steps (its ranks wait for each other's compute in the all-reduce): a
// larger share. Both are the medians of the last slow_rounds rounds, once
// the steps have been slow that many rounds: on a loaded host a slowed
// link's rounds cross the quarter now and then, and a streak that each
// crossing restarted took 3 minutes instead of 50 s (netns_cluster_test).
std::optional<FailSlowSuspected> FailSlowDetector::CheckLinks(Time now, const std::vector<double>& step_means,
                                                              double compute_median) {
  if (config_.slow_link_ratio <= 0 || step_means.empty() || !best_median_) return std::nullopt;
  const double step_median = Median(step_means);
  if (!(step_median > 0)) return std::nullopt;
  if (!best_step_median_ || step_median < *best_step_median_) best_step_median_ = step_median;
  const double ratio = step_median / *best_step_median_;
  const double added_ms = step_median - *best_step_median_;
  links_.push_back({ratio, added_ms > 0 ? (compute_median - *best_median_) / added_ms : 1});
  if (static_cast<int>(links_.size()) > config_.slow_rounds) links_.pop_front();
  // Rounds since the steps slowed; back near the best, the slowdown is over.
  if (ratio < 1 + (config_.slow_link_ratio - 1) / 2) {
    link_rounds_ = 0;
    link_reported_ = false;
  } else if (link_rounds_ > 0 || ratio >= config_.slow_link_ratio) {
    ++link_rounds_;
  }
  if (link_rounds_ == 0) return std::nullopt;
  std::vector<double> ratios, shares;
  for (const LinkRound& r : links_) {
    ratios.push_back(r.ratio);
    shares.push_back(r.compute_share);
  }
  const double typical = Median(ratios), share = Median(shares);
  const std::string what = "steps at " + Ratio(typical) + " the job's best, " +
                           std::to_string(static_cast<int>(std::max(0.0, share) * 100 + 0.5)) +
                           "% of the added time in compute";
  last_round_ += "; " + what + " (" + std::to_string(link_rounds_) + "/" + std::to_string(config_.slow_rounds) + " rounds)";
  if (link_rounds_ < config_.slow_rounds || typical < config_.slow_link_ratio || share >= 0.25 || link_reported_) {
    return std::nullopt;
  }
  link_reported_ = true;
  FailSlowSuspected f;
  f.rounds = link_rounds_;
  f.ratio = typical;
  f.network = true;
  f.detail = what + ", " + std::to_string(config_.slow_rounds) + " rounds: the network is slower";
  f.observed = now;
  return f;
}

}  // namespace bulwark::controller
