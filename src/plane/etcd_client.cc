#include "plane/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <thread>

#include "etcd/rpc.grpc.pb.h"

namespace bulwark::plane {

namespace pb = etcdserverpb;

struct EtcdClient::Member {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Maintenance::Stub> maintenance;
};

namespace {

std::vector<std::string> SplitEndpoints(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    std::string e = s.substr(start, comma - start);
    // etcd's own flags take URLs; accept them and keep host:port.
    for (const char* scheme : {"http://", "https://"}) {
      if (e.rfind(scheme, 0) == 0) e = e.substr(std::string(scheme).size());
    }
    if (!e.empty()) out.push_back(e);
    start = comma + 1;
  }
  return out;
}

// A member that is down or cut off: try another one.
bool MemberUnreachable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

EtcdKv FromPb(const pb::KeyValue& kv) { return {kv.key(), kv.value(), kv.create_revision(), kv.mod_revision(), kv.lease()}; }

}  // namespace

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(end.back() + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

EtcdClient::EtcdClient(std::string endpoints, std::chrono::milliseconds deadline)
    : endpoints_(std::move(endpoints)), deadline_(deadline) {}
EtcdClient::~EtcdClient() = default;

Result<std::unique_ptr<EtcdClient>> EtcdClient::Connect(const std::string& endpoints,
                                                        std::chrono::milliseconds deadline) {
  const std::vector<std::string> list = SplitEndpoints(endpoints);
  if (list.empty()) {
    return Status::InvalidArgument("--etcd '" + endpoints + "' names no endpoint; give host:port[,host:port...]");
  }
  std::unique_ptr<EtcdClient> c(new EtcdClient(endpoints, deadline));
  for (const std::string& e : list) {
    grpc::ChannelArguments args;
    // etcd back after an outage must be found within a lease, not after
    // gRPC's default backoff of up to two minutes.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
    auto m = std::make_unique<Member>();
    m->address = e;
    m->channel = grpc::CreateCustomChannel(e, grpc::InsecureChannelCredentials(), args);
    m->kv = pb::KV::NewStub(m->channel);
    m->lease = pb::Lease::NewStub(m->channel);
    m->watch = pb::Watch::NewStub(m->channel);
    m->maintenance = pb::Maintenance::NewStub(m->channel);
    c->members_.push_back(std::move(m));
  }
  // One read proves a member answers; its key need not exist.
  Result<std::vector<EtcdKv>> probe = c->Range("bulwark-connect-probe");
  if (!probe.ok()) return probe.status();
  return c;
}

template <typename Call>
Status EtcdClient::OnSomeMember(const std::string& what, Call call, std::chrono::milliseconds attempt) const {
  const std::chrono::milliseconds each = attempt.count() > 0 ? attempt : deadline_;
  grpc::Status last;
  const size_t n = members_.size();
  const auto until = std::chrono::steady_clock::now() + retry_for_;
  for (bool again = true; again; again = std::chrono::steady_clock::now() < until) {
    const size_t first = current_.load();
    for (size_t i = 0; i < n; ++i) {
      const size_t k = (first + i) % n;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + each);
      last = call(*members_[k], ctx);
      if (last.ok()) {
        current_ = k;
        return Status::OK();
      }
      if (!MemberUnreachable(last)) break;
    }
    if (!MemberUnreachable(last)) break;
    if (retry_for_.count() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string why = "etcd " + what + " failed at " + endpoints_ + ": " + last.error_message();
  if (MemberUnreachable(last)) {
    return Status::Unavailable(why + " (no member answered within " + std::to_string(each.count()) +
                               " ms; is etcd running there?)");
  }
  return Status::IOError(why);
}

Result<std::vector<EtcdKv>> EtcdClient::Range(const std::string& key, const std::string& range_end,
                                              int64_t* revision) const {
  pb::RangeRequest req;
  req.set_key(key);
  req.set_range_end(range_end);
  pb::RangeResponse resp;
  BULWARK_RETURN_IF_ERROR(OnSomeMember("range", [&](Member& m, grpc::ClientContext& ctx) {
    return m.kv->Range(&ctx, req, &resp);
  }));
  std::vector<EtcdKv> out;
  out.reserve(resp.kvs_size());
  for (const pb::KeyValue& kv : resp.kvs()) out.push_back(FromPb(kv));
  if (revision != nullptr) *revision = resp.header().revision();
  return out;
}

Result<std::optional<EtcdKv>> EtcdClient::LastWithPrefix(const std::string& prefix) const {
  pb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(PrefixEnd(prefix));
  req.set_limit(1);
  req.set_sort_order(pb::RangeRequest::DESCEND);
  req.set_sort_target(pb::RangeRequest::KEY);
  pb::RangeResponse resp;
  BULWARK_RETURN_IF_ERROR(OnSomeMember("range", [&](Member& m, grpc::ClientContext& ctx) {
    return m.kv->Range(&ctx, req, &resp);
  }));
  if (resp.kvs_size() == 0) return std::optional<EtcdKv>();
  return std::optional<EtcdKv>(FromPb(resp.kvs(0)));
}

Result<std::optional<EtcdKv>> EtcdClient::FirstKeyIn(const std::string& key, const std::string& range_end) const {
  pb::RangeRequest req;
  req.set_key(key);
  req.set_range_end(range_end);
  req.set_limit(1);
  req.set_keys_only(true);
  pb::RangeResponse resp;
  BULWARK_RETURN_IF_ERROR(OnSomeMember("range", [&](Member& m, grpc::ClientContext& ctx) {
    return m.kv->Range(&ctx, req, &resp);
  }));
  if (resp.kvs_size() == 0) return std::optional<EtcdKv>();
  return std::optional<EtcdKv>(FromPb(resp.kvs(0)));
}

Status EtcdClient::Txn(const pb::TxnRequest& req, pb::TxnResponse* out) const {
  return OnSomeMember("txn", [&](Member& m, grpc::ClientContext& ctx) { return m.kv->Txn(&ctx, req, out); });
}

Result<int64_t> EtcdClient::Grant(int64_t ttl_s) const {
  pb::LeaseGrantRequest req;
  req.set_ttl(ttl_s);
  pb::LeaseGrantResponse resp;
  BULWARK_RETURN_IF_ERROR(OnSomeMember("lease grant", [&](Member& m, grpc::ClientContext& ctx) {
    return m.lease->LeaseGrant(&ctx, req, &resp);
  }));
  if (!resp.error().empty()) return Status::IOError("etcd lease grant at " + endpoints_ + ": " + resp.error());
  return resp.id();
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease, std::chrono::steady_clock::time_point* sent,
                                      std::chrono::milliseconds attempt) const {
  pb::LeaseKeepAliveRequest req;
  req.set_id(lease);
  pb::LeaseKeepAliveResponse resp;
  bool answered = false;
  BULWARK_RETURN_IF_ERROR(OnSomeMember("lease keep-alive", [&](Member& m, grpc::ClientContext& ctx) {
    if (sent != nullptr) *sent = std::chrono::steady_clock::now();
    auto stream = m.lease->LeaseKeepAlive(&ctx);
    if (stream->Write(req)) answered = stream->Read(&resp);
    stream->WritesDone();
    if (answered) ctx.TryCancel();  // the answer is in; do not wait for the server to close
    grpc::Status st = stream->Finish();
    return answered ? grpc::Status::OK : st;
  }, attempt));
  return resp.ttl();
}

Status EtcdClient::Revoke(int64_t lease) const {
  pb::LeaseRevokeRequest req;
  req.set_id(lease);
  pb::LeaseRevokeResponse resp;
  return OnSomeMember("lease revoke", [&](Member& m, grpc::ClientContext& ctx) {
    return m.lease->LeaseRevoke(&ctx, req, &resp);
  });
}

Result<int> EtcdClient::RaftLeader() const {
  std::vector<uint64_t> ids(members_.size(), 0);
  uint64_t leader = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline_);
    pb::StatusResponse resp;
    if (!members_[i]->maintenance->Status(&ctx, pb::StatusRequest(), &resp).ok()) continue;
    ids[i] = resp.header().member_id();
    if (resp.leader() != 0) leader = resp.leader();
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (leader != 0 && ids[i] == leader) return static_cast<int>(i);
  }
  return Status::NotFound("no member of " + endpoints_ + " names a raft leader that answers");
}

Result<int64_t> EtcdClient::WaitForChange(const std::string& prefix, int64_t from, std::chrono::milliseconds timeout,
                                          const std::atomic<bool>* stop) const {
  const std::atomic<bool> never{false};
  // The first reply with changes ends it: the caller only wants to wake.
  return Stream(prefix, from, timeout, [](const std::vector<EtcdEvent>&) { return false; }, stop ? *stop : never);
}

int64_t EtcdClient::Watch(const std::string& prefix, int64_t from,
                          const std::function<void(const std::vector<EtcdEvent>&)>& apply,
                          const std::atomic<bool>& stop) const {
  // A member cut off leaves the stream open and silent: after 10 s with
  // nothing heard the caller opens a fresh one (on a quiet prefix too,
  // which costs it one read).
  constexpr std::chrono::milliseconds kSilence{10000};
  return Stream(
      prefix, from, kSilence,
      [&](const std::vector<EtcdEvent>& batch) {
        apply(batch);
        return true;
      },
      stop);
}

int64_t EtcdClient::Stream(const std::string& prefix, int64_t from, std::chrono::milliseconds silence,
                           const std::function<bool(const std::vector<EtcdEvent>&)>& apply,
                           const std::atomic<bool>& stop) const {
  Member& m = *members_[current_.load() % members_.size()];
  grpc::ClientContext ctx;
  auto stream = m.watch->Watch(&ctx);
  pb::WatchRequest req;
  pb::WatchCreateRequest* c = req.mutable_create_request();
  c->set_key(prefix);
  c->set_range_end(PrefixEnd(prefix));
  c->set_start_revision(from);
  using Clock = std::chrono::steady_clock;
  std::atomic<bool> done{false};
  std::atomic<Clock::rep> heard{Clock::now().time_since_epoch().count()};
  // The reader blocks; a stop request or `silence` with nothing heard
  // cancels the call.
  std::thread canceller([&] {
    while (!done) {
      if (stop || Clock::now() - Clock::time_point(Clock::duration(heard.load())) > silence) {
        ctx.TryCancel();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  int64_t seen = from - 1;
  if (stream->Write(req)) {
    pb::WatchResponse resp;
    bool more = true;
    while (more && !stop && stream->Read(&resp)) {
      heard = Clock::now().time_since_epoch().count();
      if (resp.canceled() || resp.compact_revision() > 0) break;
      if (resp.events_size() == 0) continue;
      std::vector<EtcdEvent> batch;
      batch.reserve(resp.events_size());
      for (const pb::Event& e : resp.events()) batch.push_back({FromPb(e.kv()), e.type() == pb::Event::DELETE});
      seen = batch.back().kv.mod_revision;
      more = apply(batch);
    }
  }
  done = true;
  ctx.TryCancel();
  canceller.join();
  stream->Finish().ok();
  return seen;
}

}  // namespace bulwark::plane
