// Leadership: one controller of several acts, the holder of an etcd lease.
//
// The leader key (<prefix>leader) is created with the campaigner's lease and
// its id as value; the key's create revision names the term. Every journal
// write is a transaction conditional on that revision (journal_etcd.h), so a
// controller that lost its term -- its lease expired while it was cut off,
// and another created the key -- can no longer write anything, even before
// it notices.
//
// Noticing is the keep-alive's job: renewed every ttl/10; when no renewal
// has succeeded for the renew deadline the term counts as lost here, before
// etcd expires the lease, so this process has stopped acting before a new
// leader can start. The deadline is the TTL less 1 s (at least 2/3 of it):
// etcd times a lease on its raft leader's clock from when a renewal
// arrives, after this process sent it, and a newly elected raft leader
// gives every lease its whole TTL again; what the margin must cover is this
// process's own stop (its tick notices within 250 ms and shuts its server
// at once). Kubernetes keeps 1/3 because its leases are wall-clock times
// compared across machines; etcd's are not.
// The renewal period is short for the sake of etcd's own failover: a
// renewal needs etcd's raft leader, and electing a new one after the old
// is lost takes one to two election timeouts (1-2 s at etcd's defaults,
// more on a loaded host). The time from the last renewal before that loss
// to the renew deadline must cover it, with each try cut short (see
// AttemptDeadline): with a 5 s lease, renewals 1.0-3.2 s apart across a
// killed raft leader on this 2-core host beside cluster tests and a disk
// writer, against the 4 s deadline. At 2/3 (3.33 s) and 1 s tries
// a CI run lost its term there.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "plane/etcd_client.h"

namespace bulwark::plane {

struct Term {
  std::string key;        // the leader key
  int64_t revision = 0;   // its create revision while this term lasts
};

class Leadership {
 public:
  // Campaigns for `prefix`leader as `id` with a lease of `ttl_s` seconds:
  // waits while another holds it, then takes it. Returns when this process
  // leads; Unavailable when `stop` is set first. `log` hears who leads
  // while it waits.
  static Result<std::unique_ptr<Leadership>> Campaign(const EtcdClient& etcd, const std::string& prefix,
                                                      const std::string& id, int64_t ttl_s,
                                                      const std::atomic<bool>& stop,
                                                      const std::function<void(const std::string&)>& log);
  // Resigns: revokes the lease, so a follower takes over at once rather
  // than after the TTL.
  ~Leadership();
  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  const Term& term() const { return term_; }
  // True once the lease may have expired: act on nothing more.
  bool lost() const;
  std::string why_lost() const EXCLUDES(mu_);
  // Stops keeping the lease alive without revoking it, as a process cut off
  // from etcd would (tests and the failover bench).
  void Abandon();
  // How often the lease is renewed (see above), in ms.
  int64_t RenewPeriodMs() const { return ttl_s_ * 1000 / 10; }
  // The longest time so far between two successful renewals' sends, in ms:
  // how close this term came to its renew deadline (an etcd election shows
  // here first).
  int64_t LongestRenewalGapMs() const { return longest_gap_ms_.load(); }

 private:
  Leadership(const EtcdClient& etcd, int64_t lease, int64_t ttl_s, Term term);
  void KeepAlive();
  std::chrono::milliseconds AttemptDeadline() const;
  void Lose(const std::string& why) EXCLUDES(mu_);
  int64_t RenewDeadlineMs() const { return std::max(ttl_s_ * 1000 * 2 / 3, ttl_s_ * 1000 - 1000); }

  const EtcdClient& etcd_;
  const int64_t lease_;
  const int64_t ttl_s_;
  const Term term_;
  std::atomic<bool> lost_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> abandoned_{false};
  // When the last successful renewal was sent (steady clock, ms): lost()
  // reads it, so it is right while a keep-alive is blocked on a dead member.
  std::atomic<int64_t> last_renewal_ms_{0};
  std::atomic<int64_t> longest_gap_ms_{0};
  mutable Mutex mu_;
  std::string why_lost_ GUARDED_BY(mu_);
  std::thread keeper_;
};

}  // namespace bulwark::plane
