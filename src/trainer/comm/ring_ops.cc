// The ring's collectives (a ring's reduce-scatter and all-gather, from and
// into the tensors' memory) and its point-to-point messages, on the links
// and frames of ring.cc.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "trainer/comm/dist.h"
#include "trainer/comm/ring.h"
#include "trainer/comm/ring_wire.h"

namespace bulwark::trainer {

using namespace ring_wire;

// ---------------------------------------------------------------- layout

// The group's ring (the ring of all, when flat) and, for each part this
// rank holds, the ring of that part's owners across the groups: their
// identities join the links. A generation with no view in its plan (a
// store's, or a plan cut by TwoLevel) runs RingLayout::Default's, which
// every rank computes alike.
Status Ring::FormLayout() {
  if (!view_) view_ = ViewOf(RingLayout::Default(world_, links_.group_), rank_);
  const RankRing& v = *view_;
  if (v.flat() && (v.size != world_ || v.pos != rank_)) {
    return Status::InvalidArgument("the plan's flat layout does not match rank " + std::to_string(rank_) + " of " +
                                   std::to_string(world_));
  }
  pred_ = Identity(v.group_pred);
  succ_ = Identity(v.group_succ);
  peers_ = {pred_, succ_};
  for (const auto& [part, ends] : v.cross) {
    cross_[part] = {Identity(ends.first), Identity(ends.second)};
    peers_.insert({cross_[part].first, cross_[part].second});
  }
  for (int peer : v.dials) dials_.insert(Identity(peer));
  peers_.erase(links_.identity());  // a ring of one: no link to itself
  return Status::OK();
}

Ring::SubRing Ring::Sub(const std::string& pred, const std::string& succ, int size, int pos) {
  return {Fd(succ, kRingChannel), Fd(pred, kRingChannel), size, pos};
}

// ------------------------------------------------------------ collectives

Status Ring::RingPass(const SubRing& ring, std::vector<torch::Tensor>& flat, const Cut& cut, bool max, bool scatter,
                      bool gather, int64_t tag0) {
  const int W = ring.size, r = ring.pos;
  if (W == 1) return Status::OK();
  auto pieces = [&](int c) {
    Pieces out;
    for (size_t i = 0; i < flat.size(); ++i) {
      const torch::Tensor p = cut(i, c);
      out.emplace_back(static_cast<const char*>(p.data_ptr()), p.nbytes());
    }
    return out;
  };
  auto bytes = [&](int c) {
    size_t n = 0;
    for (size_t i = 0; i < flat.size(); ++i) n += cut(i, c).nbytes();
    return n;
  };
  size_t most = 0;
  for (int c = 0; c < W; ++c) most = std::max(most, bytes(c));
  if (scratch_.numel() < static_cast<int64_t>(most)) scratch_ = torch::empty({static_cast<int64_t>(most)}, torch::kUInt8);
  char* in = static_cast<char*>(scratch_.data_ptr());
  // The received chunk c, folded into this rank's (reduce) or copied over it.
  auto take = [&](int c, bool reduce) {
    size_t off = 0;
    for (size_t i = 0; i < flat.size(); ++i) {
      torch::Tensor p = cut(i, c);
      torch::Tensor got = torch::from_blob(in + off, {p.numel()}, p.options());
      off += p.nbytes();
      if (!reduce) p.copy_(got);
      else if (max) p.copy_(torch::maximum(p, got));
      else p.add_(got);
    }
  };
  auto mod = [W](int x) { return ((x % W) + W) % W; };
  int64_t tag = tag0;
  for (int s = 0; scatter && s < W - 1; ++s) {  // reduce-scatter: rank r ends with chunk r + 1 reduced
    const int c = mod(r - s - 1);
    BULWARK_RETURN_IF_ERROR(Exchange(ring.to, pieces(mod(r - s)), ring.from, in, bytes(c), tag++));
    take(c, /*reduce=*/true);
  }
  for (int s = 0; gather && s < W - 1; ++s) {  // all-gather of the reduced chunks
    const int c = mod(r - s);
    BULWARK_RETURN_IF_ERROR(Exchange(ring.to, pieces(mod(r + 1 - s)), ring.from, in, bytes(c), tag++));
    take(c, /*reduce=*/false);
  }
  return Status::OK();
}

Status Ring::AllReduce(std::vector<torch::Tensor>& tensors, bool max) {
  if (failed_) return Status::Unavailable("the ring's generation failed");
  if (world_ == 1) return Status::OK();
  std::vector<torch::Tensor> flat;
  for (auto& t : tensors) flat.push_back(t.view({-1}));
  if (!view_->flat()) return TwoLevelAllReduce(flat, max);
  const int64_t tag0 = next_tag_;
  next_tag_ += 2 * (world_ - 1);
  Cut cut = [&](size_t i, int c) {
    const Span s = ChunkOf(flat[i].numel(), world_, c);
    return flat[i].slice(0, s.begin, s.end);
  };
  return RingPass(Sub(pred_, succ_, world_, rank_), flat, cut, max, true, true, tag0);
}

// Every rank numbers the collective's frames from the same tag, whatever
// its part in it: the group's passes first, then each part's ring in part
// order (a rank holding two parts takes them in that order, as do their
// peers, so a link's frames arrive in the order they are read).
Status Ring::TwoLevelAllReduce(std::vector<torch::Tensor>& flat, bool max) {
  const RankRing& L = *view_;
  const int s = L.size, P = L.parts, K = L.groups;
  const int64_t tag0 = next_tag_, cross0 = tag0 + P, gather0 = cross0 + int64_t{2} * K * P;
  next_tag_ = gather0 + P;
  auto part = [&](size_t i, int p) {
    const Span sp = ChunkOf(flat[i].numel(), P, p);
    return flat[i].slice(0, sp.begin, sp.end);
  };
  // RingPass leaves member pos with chunk pos + 1: chunk c is the parts
  // member c - 1 holds, consecutive ones.
  Cut group_cut = [&](size_t i, int c) {
    const auto [b, e] = L.chunks[(c + s - 1) % s];
    const int64_t n = flat[i].numel();
    return flat[i].slice(0, ChunkOf(n, P, b).begin, ChunkOf(n, P, e - 1).end);
  };
  const SubRing group = Sub(pred_, succ_, s, L.pos);
  BULWARK_RETURN_IF_ERROR(RingPass(group, flat, group_cut, max, true, false, tag0));
  for (const auto& [p, ends] : cross_) {
    std::vector<torch::Tensor> mine;
    for (size_t i = 0; i < flat.size(); ++i) mine.push_back(part(i, p));
    Cut cross_cut = [&](size_t i, int c) {
      const Span sp = ChunkOf(mine[i].numel(), K, c);
      return mine[i].slice(0, sp.begin, sp.end);
    };
    BULWARK_RETURN_IF_ERROR(RingPass(Sub(ends.first, ends.second, K, L.group), mine, cross_cut, max, true, true,
                                     cross0 + int64_t{2} * K * p));
  }
  return RingPass(group, flat, group_cut, max, false, true, gather0);
}

// `t` summed as integers of its bits (int32 words, else bytes), in place:
// a gather or broadcast in two levels, where each element is nonzero on
// one rank only.
Status Ring::SumOfOneRanksBits(torch::Tensor& t) {
  torch::Tensor all = t.view({-1});
  std::vector<torch::Tensor> bits = {all.nbytes() % 4 == 0 ? all.view(torch::kInt32) : all.view(torch::kUInt8)};
  return TwoLevelAllReduce(bits, /*max=*/false);
}

Status Ring::AllGatherChunks(torch::Tensor& flat) {
  if (failed_) return Status::Unavailable("the ring's generation failed");
  if (world_ == 1) return Status::OK();
  torch::Tensor all = flat.view({-1});
  const int64_t n = all.numel();
  const int W = world_, r = rank_;
  if (!view_->flat()) {
    const Span own = ChunkOf(n, W, r);
    const torch::Tensor keep = all.slice(0, own.begin, own.end).clone();
    all.zero_();
    all.slice(0, own.begin, own.end).copy_(keep);
    return SumOfOneRanksBits(all);
  }
  auto chunk = [&](int c) {
    const Span s = ChunkOf(n, W, ((c % W) + W) % W);
    return all.slice(0, s.begin, s.end);
  };
  const int to = Fd(succ_, kRingChannel), from = Fd(pred_, kRingChannel);
  for (int s = 0; s < W - 1; ++s) {
    const torch::Tensor c = chunk(r - s);
    torch::Tensor dst = chunk(r - s - 1);
    BULWARK_RETURN_IF_ERROR(Exchange(to, {{static_cast<const char*>(c.data_ptr()), c.nbytes()}}, from,
                                     static_cast<char*>(dst.data_ptr()), dst.nbytes(), next_tag_++));
  }
  return Status::OK();
}

// Passed along the ring from the root: W - 1 hops.
Status Ring::Broadcast(torch::Tensor& t, int root) {
  if (failed_) return Status::Unavailable("the ring's generation failed");
  if (world_ == 1) return Status::OK();
  if (!view_->flat()) {
    if (rank_ != root) t.zero_();
    return SumOfOneRanksBits(t);
  }
  const int d = (rank_ - root + world_) % world_;
  const int64_t tag = next_tag_++;
  char* data = static_cast<char*>(t.data_ptr());
  if (d != 0) BULWARK_RETURN_IF_ERROR(Exchange(-1, {}, Fd(pred_, kRingChannel), data, t.nbytes(), tag));
  if (d == world_ - 1) return Status::OK();
  return Exchange(Fd(succ_, kRingChannel), {{data, t.nbytes()}}, -1, nullptr, 0, tag);
}

// A hung rank reads nothing: its neighbours' frames stay unread, as a
// hung process's would, so they wait in their collective (reading them
// here would fail the generation at once, which is not a hang). Only the
// predecessor's link going away or the timeout ends the wait.
Status Ring::RecvNeverSent() {
  if (world_ == 1) return Status::OK();
  pollfd p{Fd(pred_, kRingChannel), 0, 0};
  if (::poll(&p, 1, MsLeft(Deadline())) == 0) return Fail(Status::Unavailable("a ring collective timed out"));
  return Fail(Status::Unavailable("a ring neighbour closed its link"));
}

// ----------------------------------------------------------- point to point

// Rank `rank`'s ring address, from the generation's store.
Result<std::string> Ring::PeerAddress(int rank) {
  try {
    return Identity(rank);
  } catch (const std::exception& e) {
    return Fail(Status::Unavailable("rank " + std::to_string(rank) + "'s ring address is not known"));
  }
}

Status Ring::Send(const torch::Tensor& t, int dst, int tag) {
  if (failed_) return Status::Unavailable("the ring's generation failed");
  auto addr = PeerAddress(dst);
  if (!addr.ok()) return addr.status();
  const std::string peer = *addr;
  int fd = Fd(peer, kPointChannel);
  if (fd < 0) {
    auto dialled = Dial(links_.identity(), peer, kPointChannel, Deadline());
    if (!dialled.ok()) return Fail(dialled.status());
    fd = *dialled;
    links_.Add({peer, kPointChannel}, fd);
  }
  std::lock_guard<std::mutex> l(mu_);
  queue_.emplace_back(fd, tag, t.contiguous());  // the caller keeps it unchanged until WaitSends
  if (!sender_.joinable()) sender_ = std::thread([this] { SendLoop(); });
  cv_.notify_all();
  return Status::OK();
}

void Ring::SendLoop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    auto [fd, tag, t] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    l.unlock();
    Frame f;
    f.kind = kData;
    f.nonce = nonce_;
    f.tag = tag;
    f.len = t.nbytes();
    size_t done = 0;
    // A generation that ends (its Ring destroyed) stops a send stuck on a
    // peer that does not read, instead of waiting out the timeout.
    Status st = WriteAll(fd, reinterpret_cast<char*>(&f), sizeof(f), Deadline(), &done, &stopping_);
    if (st.ok()) st = WriteAll(fd, static_cast<const char*>(t.data_ptr()), t.nbytes(), Deadline(), &done, &stopping_);
    // Half a frame is left on a failed link: the next generation must not
    // read it as one (WaitSends closes it).
    if (!st.ok()) ::shutdown(fd, SHUT_RDWR);
    l.lock();
    busy_ = false;
    if (!st.ok() && send_status_.ok()) send_status_ = st;
    cv_.notify_all();
  }
}

Status Ring::WaitSends() {
  Status st;
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return queue_.empty() && !busy_; });
    st = send_status_;
    send_status_ = Status::OK();
  }
  if (st.ok()) return st;
  std::vector<RingLinks::Key> point;  // which one failed is not kept: all are redialled
  for (const auto& [k, fd] : links_.fds_) {
    if (k.second == kPointChannel) point.push_back(k);
  }
  for (const auto& k : point) links_.Close(k);
  return Fail(Status::Unavailable("sending to a ring peer failed: " + st.message()));
}

// Waits until `fd` has bytes to read (a point-to-point link, or the
// listener a peer dials anew). Fails when a ring neighbour says
// this generation failed (an ABORT of it, or the link closed): the sender
// may be a live rank whose generation ended, and its point-to-point link,
// which outlives the generation, would stay silent until the timeout. A
// neighbour's frame for a later collective is left where it is, and that
// link is not watched again in this wait.
Status Ring::AwaitPoint(int fd) {
  const double deadline = Deadline();
  std::vector<int> watch;
  for (const std::string& p : peers_) {
    if (const int n = Fd(p, kRingChannel); n >= 0) watch.push_back(n);
  }
  bool hear_agent = links_.interrupt_fd_ >= 0;  // a donor that hangs says nothing either
  for (;;) {
    std::vector<pollfd> ps = {{fd, POLLIN, 0}};
    for (int w : watch) ps.push_back({w, POLLIN, 0});
    if (hear_agent) ps.push_back({links_.interrupt_fd_, POLLIN, 0});
    const int ready = ::poll(ps.data(), ps.size(), MsLeft(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0 || ps[0].revents != 0) return Status::OK();  // the read times out or fails itself
    if (hear_agent) {
      const short agent = ps.back().revents;
      ps.pop_back();
      if (agent != 0 && AgentEnded(agent, &hear_agent)) {
        return Fail(Status::Unavailable("the agent ended this generation while a transfer was awaited"));
      }
    }
    for (size_t i = 1; i < ps.size(); ++i) {
      if (ps[i].revents == 0) continue;
      Frame f;
      const ssize_t k = ::recv(ps[i].fd, &f, sizeof(f), MSG_PEEK | MSG_DONTWAIT);
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (k <= 0) return Fail(Status::Unavailable("a ring neighbour closed its link"));
      if (k == sizeof(f) && f.magic == Frame().magic && f.nonce == nonce_ && f.kind == kAbort) {
        return Fail(Status::Unavailable("a ring peer's collective failed"));
      }
      watch.erase(std::find(watch.begin(), watch.end(), ps[i].fd));
    }
  }
}

Status Ring::Recv(torch::Tensor& t, int src, int tag) {
  if (failed_) return Status::Unavailable("the ring's generation failed");
  auto addr = PeerAddress(src);
  if (!addr.ok()) return addr.status();
  const std::string peer = *addr;
  for (int attempt = 0; attempt < 2; ++attempt) {
    BULWARK_RETURN_IF_ERROR(AcceptUntil({peer, kPointChannel}, /*watch_ring=*/true));
    BULWARK_RETURN_IF_ERROR(AwaitPoint(Fd(peer, kPointChannel)));
    bool eof = false;
    Status st = ReadFrame(Fd(peer, kPointChannel), tag, static_cast<char*>(t.data_ptr()), t.nbytes(), &eof);
    if (st.ok()) return Status::OK();
    links_.Close({peer, kPointChannel});  // a kept link the sender gave up: it dials anew
    if (!eof) return Fail(st);
  }
  return Fail(Status::Unavailable("no state from rank " + std::to_string(src)));
}

}  // namespace bulwark::trainer
