// The ETTR ledger: splits a job's wall time into productive time and the
// categories of unproductive time, cumulatively and over a sliding window.
//
// ETTR (effective training time ratio) = productive time / wall time.
//
// The ledger is a timeline of contiguous segments, each with one category,
// from Start() to now (or to Stop()). It is fed phase changes and step
// completions and never reads a clock; queries take `now`.
//
//  * Running: the time of step k (from the previous step, or from the end of
//    recovery, to step k) is productive when k is new (above every step seen
//    before) and recomputation when k redoes a step lost to a fault.
//  * FaultDetected(fault, detected): the unfinished step in flight at the
//    fault is thrown away, so [last step, fault] becomes recomputation;
//    [fault, detected] is detection; localization starts at `detected`.
//  * Enter(category, t): the controller's decision moves the job into
//    recovery, waiting for machines or a manual restart; the first step
//    completed afterwards ends that phase.
//
// Reports can arrive late. Times earlier than the last boundary are moved up
// to it, so segments stay ordered and no time is counted twice; a step that
// completed before the current phase began only moves the step counters.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "common/status.h"
#include "controller/time.h"

namespace bulwark::controller {

enum class TimeCategory {
  kProductive,
  kStartup,        // from job start to its first step
  kDetection,      // fault happened, controller not yet told
  kLocalization,   // controller told, culprit not yet named and acted on
  kRecovery,       // restart decided until the first step after it (failover)
  kRecomputation,  // redoing steps lost to a fault, and partial steps thrown away
  kWaiting,        // no standby left: waiting for a machine to join
  kManual,         // an operator's restart until the first step after it
  // An elastic job training on fewer replicas than it has (controller/job.h):
  // the missing replicas' share of each step's time. A step at 3 of 4
  // replicas is 3/4 productive and 1/4 degraded.
  kDegraded,
};
constexpr int kNumTimeCategories = 9;
const char* TimeCategoryName(TimeCategory c);

struct TimeBreakdown {
  Duration wall{0};
  std::array<Duration, kNumTimeCategories> by_category{};

  Duration of(TimeCategory c) const { return by_category[static_cast<int>(c)]; }
  Duration productive() const { return of(TimeCategory::kProductive); }
  Duration unproductive() const { return wall - productive(); }
  // productive / wall; 0 while no wall time has passed.
  double ettr() const;
};

// One stretch of the timeline: [start, end) spent in one category.
struct LedgerSegment {
  Time start;
  Time end;
  TimeCategory category;
  double share = 1.0;  // productive segments: the share of the replicas training
};

class Ledger {
 public:
  explicit Ledger(Duration window = std::chrono::hours(1));

  // Wall time starts; startup until the first step. Calls before Start and
  // after Stop are ignored (Enter reports them).
  void Start(Time t);
  void StepCompleted(int64_t step, Time t);
  // `fault_at` is when the fault happened if known; without it detection
  // time is zero and everything from the last step on is recomputation.
  void FaultDetected(std::optional<Time> fault_at, Time detected);
  // Enters a phase chosen by the controller: kStartup, kLocalization,
  // kRecovery, kWaiting or kManual. InvalidArgument for the categories that
  // only steps and faults produce; FailedPrecondition before Start or after Stop.
  Status Enter(TimeCategory phase, Time t);
  // Wall time ends: a stopped job accrues no more time.
  void Stop(Time t);
  // The share of the job's replicas that train from now on (1: all). Set at
  // a restart, while the ledger is in recovery. Below 1, steps split their
  // time between productive and degraded by pace, not by replicas: the
  // productive part is the new steps times the full-width time per step
  // (the median of the last kPaces stretches at share 1), the rest is
  // degraded. The narrower job does the same global batch a step, so that
  // is the time the full job would have spent on the same work: 2 of 3
  // replicas at one micro-batch each take two micro-batch times a step and
  // are half productive, not two thirds. With no full-width pace yet, the
  // replicas' share stands for it.
  void SetShare(double share);

  TimeBreakdown Cumulative(Time now) const;
  // Over [now - window, now], clipped to the job's life.
  TimeBreakdown Window(Time now) const;
  // Every segment from Start() to now (or Stop()), oldest first, the open
  // one included as it would close at `now`: what a report draws.
  std::vector<LedgerSegment> Timeline(Time now) const;

  Duration window() const { return window_; }
  bool started() const { return started_; }
  bool stopped() const { return stopped_; }
  // The highest step ever completed; steps at or below it are recomputation.
  int64_t high_water_step() const { return high_water_; }

 private:
  using Segment = LedgerSegment;

  Time Clamp(Time t) const { return t < open_start_ ? open_start_ : t; }
  // The category of the open segment: the current phase, or while running
  // whatever the step in flight will be.
  TimeCategory OpenCategory() const;
  // Ends the open segment at `end` as `category` and opens the next at `end`.
  void Close(Time end, TimeCategory category);
  TimeBreakdown Between(Time from, Time to) const;
  // Running, `steps` new steps took `took`: a full-width pace, or below
  // full width the open stretch's productive share.
  void MeasurePace(int64_t steps, Duration took);

  Duration window_;
  bool started_ = false;
  bool stopped_ = false;
  Time start_{};
  Time open_start_{};
  std::optional<TimeCategory> phase_;  // empty while running
  int64_t last_step_ = 0;
  int64_t high_water_ = 0;
  double share_ = 1.0;       // of the replicas
  double open_share_ = 1.0;  // productive share of the open stretch, by pace
  static constexpr size_t kPaces = 16;
  std::deque<Duration> paces_;  // time per step of recent stretches at full width
  std::vector<Segment> segments_;      // closed, contiguous, adjacent ones merged
};

}  // namespace bulwark::controller
