// Warm standby pool sizing (ByteRobust §3): estimate a per-machine daily
// failure rate p, model the machines that fail on one day as Binomial(N, p),
// and keep the pool at its 99th percentile, so that on 99 days in 100 every
// eviction finds a standby already self-checked and waiting.
#pragma once

#include "common/status.h"

namespace bulwark::controller {

// The smallest k with P[X <= k] >= q for X ~ Binomial(n, p).
// InvalidArgument unless n >= 0, 0 <= p <= 1 and 0 < q <= 1.
// Exact to double precision: terms are summed in log space, so it holds for
// fleets of any size (n = 10^6 underflows a naive (1-p)^n).
Result<int> BinomialQuantile(int n, double p, double q);

struct StandbyReport {
  int target = 0;     // P(quantile) of Binomial(active, daily_failure_rate)
  int available = 0;  // spare machines in kStandby (not needed to fill the job)
  int deficit() const { return target > available ? target - available : 0; }
};

// The report for a job using `active` machines; the rate and quantile come
// from PolicyConfig (validated there, so this cannot fail on them).
StandbyReport MakeStandbyReport(int active, int available, double daily_failure_rate,
                                double quantile);

}  // namespace bulwark::controller
