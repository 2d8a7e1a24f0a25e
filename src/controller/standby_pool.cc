#include "controller/standby_pool.h"

#include <cmath>
#include <string>

namespace bulwark::controller {

Result<int> BinomialQuantile(int n, double p, double q) {
  if (n < 0) return Status::InvalidArgument("binomial quantile: n = " + std::to_string(n) + " is negative");
  if (!(p >= 0.0 && p <= 1.0)) {
    return Status::InvalidArgument("binomial quantile: p = " + std::to_string(p) + " is outside [0, 1]");
  }
  if (!(q > 0.0 && q <= 1.0)) {
    return Status::InvalidArgument("binomial quantile: q = " + std::to_string(q) + " is outside (0, 1]");
  }
  if (n == 0 || p == 0.0) return 0;
  // With 0 < p < 1 only k = n reaches a CDF of exactly 1.
  if (p == 1.0 || q == 1.0) return n;
  // log P[X = k] = log C(n, k) + k log p + (n - k) log(1 - p).
  const double log_p = std::log(p);
  const double log_q = std::log1p(-p);
  const double log_n_fact = std::lgamma(n + 1.0);
  double cdf = 0.0;
  for (int k = 0; k < n; ++k) {
    double log_pmf = log_n_fact - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0) + k * log_p +
                     (n - k) * log_q;
    cdf += std::exp(log_pmf);
    if (cdf >= q) return k;
  }
  return n;
}

StandbyReport MakeStandbyReport(int active, int available, double daily_failure_rate,
                                double quantile) {
  // Reconcile asks after every event with the same arguments; the sum costs
  // O(target) lgamma calls, so the last answer is kept (per thread, so the
  // function stays safe to call from parallel simulations).
  struct Memo {
    int n = -1;
    double p = 0, q = 0;
    int target = 0;
  };
  thread_local Memo memo;
  if (memo.n != active || memo.p != daily_failure_rate || memo.q != quantile) {
    Result<int> target = BinomialQuantile(active, daily_failure_rate, quantile);
    memo = {active, daily_failure_rate, quantile, target.ok() ? *target : 0};
  }
  StandbyReport r;
  r.target = memo.target;
  r.available = available;
  return r;
}

}  // namespace bulwark::controller
