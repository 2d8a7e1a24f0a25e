#include "plane/leader.h"

#include <algorithm>
#include <thread>

#include "etcd/rpc.pb.h"

namespace bulwark::plane {

namespace pb = etcdserverpb;

namespace {

using Clock = std::chrono::steady_clock;

// Creates `key` with `lease` unless it exists: the whole election.
Result<int64_t> TryTake(const EtcdClient& etcd, const std::string& key, const std::string& id, int64_t lease) {
  pb::TxnRequest txn;
  pb::Compare* free = txn.add_compare();
  free->set_key(key);
  free->set_target(pb::Compare::CREATE);
  free->set_result(pb::Compare::EQUAL);
  free->set_create_revision(0);
  pb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(id);
  put->set_lease(lease);
  pb::TxnResponse resp;
  BULWARK_RETURN_IF_ERROR(etcd.Txn(txn, &resp));
  // The put happened at the txn's revision: the key's create revision.
  return resp.succeeded() ? resp.header().revision() : 0;
}

}  // namespace

Result<std::unique_ptr<Leadership>> Leadership::Campaign(const EtcdClient& etcd, const std::string& prefix,
                                                         const std::string& id, int64_t ttl_s,
                                                         const std::atomic<bool>& stop,
                                                         const std::function<void(const std::string&)>& log) {
  const std::string key = prefix + "leader";
  std::string said;
  auto say = [&](const std::string& line) {
    if (line != said) log(line);
    said = line;
  };
  while (!stop) {
    Result<std::vector<EtcdKv>> held = etcd.Range(key);
    if (!held.ok()) {
      say("cannot campaign: " + held.status().message() + "; retrying");
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      continue;
    }
    if (!held->empty()) {
      say("following: " + (*held)[0].value + " leads (" + key + ")");
      // Wakes on the key's deletion: its holder resigned or its lease expired.
      etcd.WaitForChange(key, (*held)[0].mod_revision + 1, std::chrono::milliseconds(1000), &stop).IgnoreError();
      continue;
    }
    const Clock::time_point asked = Clock::now();
    Result<int64_t> lease = etcd.Grant(ttl_s);
    if (!lease.ok()) continue;
    Result<int64_t> rev = TryTake(etcd, key, id, *lease);
    if (rev.ok() && *rev > 0) {
      std::unique_ptr<Leadership> l(new Leadership(etcd, *lease, ttl_s, Term{key, *rev}));
      l->last_renewal_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(asked.time_since_epoch()).count();
      l->keeper_ = std::thread([p = l.get()] { p->KeepAlive(); });
      log("leading: " + id + " holds " + key + " (term " + std::to_string(*rev) + ", lease " +
          std::to_string(ttl_s) + " s)");
      return l;
    }
    etcd.Revoke(*lease).IgnoreError();
  }
  return Status::Unavailable("campaign for " + key + " stopped before this controller led");
}

Leadership::Leadership(const EtcdClient& etcd, int64_t lease, int64_t ttl_s, Term term)
    : etcd_(etcd), lease_(lease), ttl_s_(ttl_s), term_(std::move(term)) {}

Leadership::~Leadership() {
  stop_ = true;
  if (keeper_.joinable()) keeper_.join();
  if (!abandoned_) etcd_.Revoke(lease_).IgnoreError();
}

bool Leadership::lost() const {
  if (lost_) return true;
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
  return now - last_renewal_ms_.load() >= RenewDeadlineMs();
}

std::string Leadership::why_lost() const {
  MutexLock lock(&mu_);
  if (!why_lost_.empty()) return why_lost_;
  return lost() ? "no lease renewal for " + std::to_string(RenewDeadlineMs()) + " ms (etcd unreachable at " +
                      etcd_.endpoints() + ")"
                : "";
}

void Leadership::Abandon() {
  abandoned_ = true;
  stop_ = true;
}

void Leadership::Lose(const std::string& why) {
  MutexLock lock(&mu_);
  if (why_lost_.empty()) why_lost_ = why;
  lost_ = true;
}

// Each renewal try is cut at a renewal period (at least 500 ms, at most the
// client's deadline): etcd answers a renewal sent after it elects a raft
// leader, not one still waiting from before, so a shorter try moves the
// last answered send -- what the renew deadline counts from -- closer to
// the election's end. Cut at the client's 1 s, one member killed cost
// 2.6 s between renewals on a quiet host and more than the 3.3 s deadline
// in CI.
std::chrono::milliseconds Leadership::AttemptDeadline() const {
  const std::chrono::milliseconds period(std::max<int64_t>(RenewPeriodMs(), 500));
  return std::min(period, etcd_.deadline());
}

void Leadership::KeepAlive() {
  const auto period = std::chrono::milliseconds(RenewPeriodMs());
  Clock::time_point next = Clock::now() + period;
  while (!stop_ && !lost_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (Clock::now() < next) continue;
    // When the renewal that etcd answered was sent: the call may have
    // tried every member for a while before one answered.
    Clock::time_point sent = Clock::now();
    Result<int64_t> ttl = etcd_.KeepAlive(lease_, &sent, AttemptDeadline());
    if (stop_) return;
    if (ttl.ok() && *ttl > 0) {
      const int64_t at = std::chrono::duration_cast<std::chrono::milliseconds>(sent.time_since_epoch()).count();
      longest_gap_ms_ = std::max(longest_gap_ms_.load(), at - last_renewal_ms_.load());
      last_renewal_ms_ = at;
      next = sent + period;
    } else if (ttl.ok()) {
      Lose("the lease expired in etcd (" + term_.key + " is no longer this controller's)");
    } else {
      next = Clock::now() + std::chrono::milliseconds(200);  // retry soon: the deadline is running
      if (lost()) Lose("no lease renewal for " + std::to_string(RenewDeadlineMs()) + " ms: " + ttl.status().message());
    }
  }
}

}  // namespace bulwark::plane
