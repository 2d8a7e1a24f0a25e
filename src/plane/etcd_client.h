// EtcdClient: the few calls of etcd's v3 gRPC API (proto/etcd/rpc.proto)
// that the controller's journal (journal_etcd.h) and its leader lease
// (leader.h) need: range, txn, lease grant/keep-alive/revoke, and a watch.
//
// Endpoints are tried in turn: a call that finds its member unreachable or
// past its deadline goes to the next one, so one etcd member lost (killed,
// partitioned away from the quorum) costs a call one deadline, not the
// controller. Every call has a deadline; an etcd that answers none is
// Unavailable, naming the endpoints.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace etcdserverpb {
class TxnRequest;
class TxnResponse;
}  // namespace etcdserverpb

namespace bulwark::plane {

struct EtcdKv {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct EtcdEvent {
  EtcdKv kv;
  bool deleted = false;
};

// The end of the range holding every key that begins with `prefix`.
std::string PrefixEnd(const std::string& prefix);

class EtcdClient {
 public:
  // `endpoints`: "host:port[,host:port...]". Checks that one member answers
  // within `deadline`; when none does: Unavailable, one line naming them.
  static Result<std::unique_ptr<EtcdClient>> Connect(const std::string& endpoints,
                                                     std::chrono::milliseconds deadline);
  ~EtcdClient();

  // Keys in [key, range_end) ("" range_end: the key alone), by key; with
  // `revision`, the store's revision the answer reflects.
  Result<std::vector<EtcdKv>> Range(const std::string& key, const std::string& range_end = "",
                                    int64_t* revision = nullptr) const;
  // The last key of the prefix's range, if any (one key, sorted descending).
  Result<std::optional<EtcdKv>> LastWithPrefix(const std::string& prefix) const;
  // The first key in [key, range_end), if any, without its value.
  Result<std::optional<EtcdKv>> FirstKeyIn(const std::string& key, const std::string& range_end) const;
  Status Txn(const etcdserverpb::TxnRequest& req, etcdserverpb::TxnResponse* out) const;

  // A lease of `ttl_s` seconds; its ID.
  Result<int64_t> Grant(int64_t ttl_s) const;
  // One keep-alive; the lease's remaining TTL (<= 0: it has expired).
  // `sent`, if given: when the request that was answered went out (a call
  // that tried several members, or tried them again, sent several).
  // `attempt`, if above zero, bounds each try instead of the client's
  // deadline: a renewal sent while etcd elects a raft leader is not
  // answered once one is elected, only a renewal sent after is, so a
  // long try leaves the last answered send that much further back.
  Result<int64_t> KeepAlive(int64_t lease, std::chrono::steady_clock::time_point* sent = nullptr,
                            std::chrono::milliseconds attempt = std::chrono::milliseconds(0)) const;
  Status Revoke(int64_t lease) const;

  // Blocks until a key in [prefix, PrefixEnd(prefix)) changes at a revision
  // >= `from`, `timeout` passes or `stop` is set; the revision seen
  // (from - 1 when nothing changed). One watch stream per call.
  Result<int64_t> WaitForChange(const std::string& prefix, int64_t from, std::chrono::milliseconds timeout,
                                const std::atomic<bool>* stop = nullptr) const;

  // Streams every change to a key in [prefix, PrefixEnd(prefix)) from
  // revision `from` on, in order, to `apply`: one call per etcd reply, which
  // holds whole revisions (a transaction's changes together). A delete has
  // an empty value and the delete's revision as mod_revision. Runs until the
  // stream breaks or `stop` is set; returns the last revision applied
  // (from - 1 when none). One stream on the current member; the caller
  // resumes after a break.
  int64_t Watch(const std::string& prefix, int64_t from,
                const std::function<void(const std::vector<EtcdEvent>&)>& apply, const std::atomic<bool>& stop) const;

  // Index (in the endpoints' order) of the member that leads etcd's raft,
  // as the members say; NotFound when none answers with a leader.
  Result<int> RaftLeader() const;

  // How long a call keeps trying the members again while none answers
  // (default 0: one pass). An etcd that lost its raft leader answers no
  // write until it has elected another (1-2 s at etcd's default timing); a
  // controller's journal write must wait that out, not fail the plane.
  // Retrying is safe for every call bulwark makes: puts and deletes are
  // idempotent, and a txn whose first try landed fails its compare on the
  // second, which the journal reads as such (journal_etcd.cc).
  void set_retry_for(std::chrono::milliseconds d) { retry_for_ = d; }

  const std::string& endpoints() const { return endpoints_; }
  std::chrono::milliseconds deadline() const { return deadline_; }

 private:
  struct Member;
  EtcdClient(std::string endpoints, std::chrono::milliseconds deadline);
  // One watch stream: each reply with changes goes to `apply`, which says
  // whether to read on; ends at a break, `stop`, or `silence` with nothing
  // heard. The last revision seen (from - 1 when none).
  int64_t Stream(const std::string& prefix, int64_t from, std::chrono::milliseconds silence,
                 const std::function<bool(const std::vector<EtcdEvent>&)>& apply, const std::atomic<bool>& stop) const;
  // Runs `call` against each member from the current one on, until one
  // answers with anything but UNAVAILABLE or DEADLINE_EXCEEDED.
  // Each try has `attempt` if above zero, else the client's deadline.
  template <typename Call>
  Status OnSomeMember(const std::string& what, Call call,
                      std::chrono::milliseconds attempt = std::chrono::milliseconds(0)) const;

  std::string endpoints_;
  std::chrono::milliseconds deadline_;
  std::chrono::milliseconds retry_for_{0};
  std::vector<std::unique_ptr<Member>> members_;
  mutable std::atomic<size_t> current_{0};
};

}  // namespace bulwark::plane
