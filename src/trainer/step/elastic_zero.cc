#include "trainer/step/elastic_zero.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace bulwark::trainer {
namespace {

// Tags of the backup exchange, apart from the live state's (elastic.cc).
constexpr int kBackupTag = 1 << 21;

}  // namespace

Span ZeroRangeOf(const ParamStore& store, int width, int rank) {
  const Span s = ChunkOf(store.params().numel(), width, rank);
  return {std::min(store.num_params(), s.begin), std::min(store.num_params(), s.end)};
}

void ElasticZero::Begin(int64_t step, int rank, int width) {
  step_ = step;
  rank_ = rank;
  width_ = width;
  // Copies of another width or step describe a state this one left.
  Drop([&](const Part& c) { return c.parts != width || c.step != step; });
}

template <typename Pred>
void ElasticZero::Drop(Pred pred) {
  copies_.erase(std::remove_if(copies_.begin(), copies_.end(), pred), copies_.end());
}

void ElasticZero::Keep(Part p) {
  // The step being finished and the one before it: a failed step leaves
  // the ranks at either.
  Drop([&](const Part& c) {
    return c.step < p.step - 1 || (c.part == p.part && c.parts == p.parts && c.step == p.step);
  });
  copies_.push_back(std::move(p));
}

void ElasticZero::Hold(ParamStore& store, const AdamW& opt) {
  auto keep = [](torch::Tensor& into, const torch::Tensor& from) {
    if (!into.defined() || into.numel() != from.numel()) into = torch::empty_like(from);
    into.copy_(from);
  };
  keep(params_before_, store.params());
  keep(m_before_, opt.m());
  keep(v_before_, opt.v());
}

Status ElasticZero::Exchange(Comm& comm, const ParamStore& store, const AdamW& opt) {
  if (width_ == 1) return Status::OK();
  const int pred = (rank_ + width_ - 1) % width_, succ = (rank_ + 1) % width_;
  const int64_t n = ZeroRangeOf(store, width_, pred).size();
  Part theirs{pred, width_, step_ + 1, torch::empty({n}, opt.m().options()), torch::empty({n}, opt.v().options())};
  auto send = [&] {
    BULWARK_RETURN_IF_ERROR(comm.Send(opt.m(), succ, kBackupTag));
    return comm.Send(opt.v(), succ, kBackupTag + 1);
  };
  auto receive = [&] {
    BULWARK_RETURN_IF_ERROR(comm.Recv(theirs.m, pred, kBackupTag));
    return comm.Recv(theirs.v, pred, kBackupTag + 1);
  };
  // A point link is dialled by the sender. Two ranks that are each
  // other's predecessor and successor would dial each other at once and
  // each wait on its own link: rank 1 receives first, on rank 0's.
  if (width_ == 2 && rank_ == 1) {
    BULWARK_RETURN_IF_ERROR(receive());
    BULWARK_RETURN_IF_ERROR(send());
  } else {
    BULWARK_RETURN_IF_ERROR(send());
    BULWARK_RETURN_IF_ERROR(receive());
  }
  // The next update changes what was sent: it must have left first.
  BULWARK_RETURN_IF_ERROR(comm.WaitSends());
  Keep(std::move(theirs));
  return Status::OK();
}

Status ElasticZero::AfterUpdate(Comm& comm, ParamStore& store, AdamW& opt) {
  Status s = Exchange(comm, store, opt);
  if (s.ok() && width_ > 1) s = comm.AllGatherChunks(store.params());
  if (!s.ok()) {
    Keep({rank_, width_, step_ + 1, opt.m().clone(), opt.v().clone()});
    store.params().copy_(params_before_);
    opt.m().copy_(m_before_);
    opt.v().copy_(v_before_);
    return s;
  }
  ++step_;
  return Status::OK();
}

Result<ElasticZero::Recut> ElasticZero::RecutFor(Comm& comm, ParamStore& store, const AdamW* own, int64_t own_step,
                                                 int64_t step, bool merged, AdamW& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const int W = comm.world_size(), rank = comm.rank();
  // What this rank offers of `step`: its own part, kept copies.
  std::vector<Part> offers;
  if (own != nullptr && own_step == step) {
    offers.push_back({rank_, width_, step, own->m(), own->v()});
  }
  for (const Part& c : copies_) {
    if (c.step == step) offers.push_back(c);
  }
  // The width the parts were cut for, and whether every rank already owns
  // its new part, in one all-reduce of maxima.
  int64_t hi = 0, lo = std::numeric_limits<int32_t>::max();
  for (const Part& o : offers) hi = std::max<int64_t>(hi, o.parts), lo = std::min<int64_t>(lo, o.parts);
  const bool kept = own == &opt && own_step == step && rank_ == rank && width_ == W;
  auto agree = torch::tensor({hi, -lo, int64_t{kept ? 0 : 1}}, torch::kInt64);
  std::vector<torch::Tensor> a{agree};
  BULWARK_RETURN_IF_ERROR(comm.AllReduceMax(a));
  const int64_t parts = agree[0].item<int64_t>();
  if (parts == 0 || parts != -agree[1].item<int64_t>()) {
    return Status::FailedPrecondition("ZeRO-1: no live rank holds the optimizer state of step " + std::to_string(step) +
                                      " in one cut");
  }
  Recut out;
  if (agree[2].item<int64_t>() == 0) return out;  // each rank's own part is its new one

  // Each part from its lowest holder: W - rank, so that a maximum picks it.
  auto holder = torch::zeros({parts}, torch::kInt64);
  for (const Part& o : offers) holder[o.part] = std::max<int64_t>(holder[o.part].item<int64_t>(), W - rank);
  std::vector<torch::Tensor> h{holder};
  BULWARK_RETURN_IF_ERROR(comm.AllReduceMax(h));
  for (int k = 0; k < parts; ++k) {
    if (holder[k].item<int64_t>() == 0) {
      return Status::FailedPrecondition("ZeRO-1: part " + std::to_string(k) + " of " + std::to_string(parts) +
                                        " of the optimizer state of step " + std::to_string(step) +
                                        " is on no live rank (its rank and its backup peer were both lost)");
    }
  }
  // The whole moments, each element from one holder and zero elsewhere,
  // summed as integers: the sum is that holder's bits exactly.
  const int64_t N = store.params().numel();
  auto m = torch::zeros({N}, opt.m().options()), v = torch::zeros({N}, opt.v().options());
  for (const Part& o : offers) {
    if (holder[o.part].item<int64_t>() != W - rank) continue;
    const Span s = ZeroRangeOf(store, static_cast<int>(parts), o.part);
    m.narrow(0, s.begin, s.size()).copy_(o.m);
    v.narrow(0, s.begin, s.size()).copy_(o.v);
    holder[o.part] = 0;  // one copy of a part, when two offers match
  }
  std::vector<torch::Tensor> bits{m.view(torch::kInt32), v.view(torch::kInt32)};
  BULWARK_RETURN_IF_ERROR(comm.AllReduceSum(bits));
  if (merged) {
    // POET merged at `step` and zeroed its group's moments after the
    // backups were sent: the copies still hold the values before.
    const ParamGroup& g = store.poet_group();
    m.narrow(0, g.begin, g.end - g.begin).zero_();
    v.narrow(0, g.begin, g.end - g.begin).zero_();
  }
  const Span mine = ZeroRangeOf(store, W, rank), pred = ZeroRangeOf(store, W, (rank + W - 1) % W);
  opt.m().copy_(m.narrow(0, mine.begin, mine.size()));
  opt.v().copy_(v.narrow(0, mine.begin, mine.size()));
  copies_.clear();
  copies_.push_back({(rank + W - 1) % W, W, step, m.narrow(0, pred.begin, pred.size()).clone(),
                     v.narrow(0, pred.begin, pred.size()).clone()});
  out.moved = true;
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace bulwark::trainer
