#include "trainer/state/memory_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "rank_client/shard_socket.h"

namespace bulwark::trainer {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMetaCapacity = 64 << 10;
constexpr int kMaxCandidates = 16;  // distinct steps one rank offers to the agreement

uint64_t TimelineOf(const rank_client::ShardView& v) {
  nlohmann::json meta = nlohmann::json::parse(v.meta, nullptr, false);
  return meta.is_object() && meta.contains("timeline") ? meta["timeline"].get<uint64_t>() : 0;
}

// Restore sources from fastest to slowest; the outcome names the slowest used.
int SourceRank(const std::string& source) {
  if (source == "memory") return 0;
  if (source.rfind("peer", 0) == 0) return 1;
  return 2;
}

// dst = the bytes at src (dst's size and type): a memcpy on the CPU, a copy
// to the device on a GPU rank.
void CopyIn(torch::Tensor dst, const void* src) {
  if (dst.is_cpu()) {
    std::memcpy(dst.data_ptr(), src, static_cast<size_t>(dst.numel() * dst.element_size()));
    return;
  }
  dst.copy_(torch::from_blob(const_cast<void*>(src), dst.sizes(), dst.options().device(torch::kCPU)));
}

}  // namespace

MemoryCheckpoint::MemoryCheckpoint(const TrainConfig& cfg, Comm& comm, Comm& group, Transformer& model,
                                   ParamStore& store, AdamW& opt, Note note)
    : cfg_(cfg), comm_(comm), group_(group), model_(model), store_(store), opt_(opt), note_(std::move(note)) {
  for (auto& b : model->named_buffers()) buffer_bytes_ += b.value().numel() * b.value().element_size();
  mine_ = SliceOf(group.rank(), comm.rank());
  begin_ = mine_.begin;
  end_ = mine_.end;
  buf_begin_ = mine_.buf_begin;
  buf_end_ = mine_.buf_end;
}

// The copier thread reads the staged buffers and generator state (members
// of this object), the parameters and the optimizer's moments until the
// image it writes is sealed. A generation that fails mid-copy destroys this
// object: without the wait, the copier went on reading freed memory and
// sealed it under a valid checksum, and a standby that restored that copy
// died of "Invalid mt19937 state" (twice: the controller evicted it); in a
// rank that stays in its process, the restore would also overwrite the
// parameters while they were still being copied.
MemoryCheckpoint::~MemoryCheckpoint() {
  if (client_) client_->WaitCopied().IgnoreError();  // a failed copy is the old generation's, not ours
}

MemoryCheckpoint::Slice MemoryCheckpoint::SliceOf(int index, int rank) const {
  const int W = group_.world_size();
  const Span params = ChunkOf(store_.params().numel(), W, index);
  const Span floats = ChunkOf(BufferFloats(), W, index);  // buffers are gathered as floats
  Slice s;
  s.rank = rank;
  s.begin = std::min<int64_t>(store_.num_params(), params.begin);
  s.end = std::min<int64_t>(store_.num_params(), params.end);
  s.buf_begin = std::min(buffer_bytes_, 4 * floats.begin);
  s.buf_end = std::min(buffer_bytes_, 4 * floats.end);
  return s;
}

Result<std::unique_ptr<MemoryCheckpoint>> MemoryCheckpoint::Open(const TrainConfig& cfg, Comm& comm,
                                                                 Transformer& model, ParamStore& store, AdamW& opt,
                                                                 Note note, Comm* group) {
  if (cfg.memory_ckpt == "off") return std::unique_ptr<MemoryCheckpoint>();
  const char* socket = std::getenv(rank_client::kShardSocketEnv);
  std::unique_ptr<rank_client::ShardClient> c;
  Status why = Status::OK();
  if (socket == nullptr || *socket == '\0') {
    why = Status::FailedPrecondition(std::string(rank_client::kShardSocketEnv) +
                                     " is unset: no agent offers shared memory for checkpoints; run under bulwark or "
                                     "use --memory-ckpt off");
  } else {
    auto connected = rank_client::ShardClient::Connect(socket, comm.rank(), comm.world_size());
    if (connected.ok()) c = std::move(*connected);
    else why = connected.status();
  }
  // All ranks or none: a mixed world would disagree in Restore's collectives.
  auto missing = torch::tensor({c ? 0.0 : 1.0}, torch::kFloat64);
  std::vector<torch::Tensor> v{missing};
  BULWARK_RETURN_IF_ERROR(comm.AllReduceSum(v));
  if (missing.item<double>() > 0) {
    if (cfg.memory_ckpt == "on") {
      return why.ok() ? Status::FailedPrecondition("another rank has no agent for in-memory checkpoints")
                      : why.Annotate("--memory-ckpt on");
    }
    if (!why.ok() && socket != nullptr) note("in-memory checkpoints off: " + why.message());
    return std::unique_ptr<MemoryCheckpoint>();
  }
  Comm& g = group != nullptr ? *group : comm;
  std::unique_ptr<MemoryCheckpoint> m(new MemoryCheckpoint(cfg, comm, g, model, store, opt, std::move(note)));
  m->client_ = std::move(c);
  if (!store.params().is_cpu()) {
    m->stage_ = std::make_unique<DeviceStage>(store.params().device());
    static bool said = false;  // once a process, not every generation
    if (!std::exchange(said, true))
      m->note_(std::string("in-memory checkpoints leave the device through pinned memory, ") +
               (DeviceStage::Async() ? "on a CUDA stream of their own" : "synchronously (built without c10's CUDA headers)"));
  }
  // Replicated state: this rank holds everything rank `of` would save, so
  // it writes that rank's backup itself (client/shard_client.h). Only when
  // every rank holds the same state: another pipeline stage's is not ours.
  const char* of = std::getenv(rank_client::kShardBackupOfEnv);
  if (&g == &comm && !cfg.shard_optimizer && comm.world_size() > 1 && of != nullptr && *of != '\0') {
    const int b = std::atoi(of);
    if (b >= 0 && b < comm.world_size() && b != comm.rank()) m->theirs_ = m->SliceOf(b, b);
  }
  return m;
}

std::vector<rank_client::ShardSection> MemoryCheckpoint::Sections(const Slice& s, size_t staged) {
  const size_t n = static_cast<size_t>(s.end - s.begin) * sizeof(float);
  const float *params, *m, *v;
  if (stage_) {  // the device's bytes are read from their pinned copies
    params = stage_->host(3 * staged).data_ptr<float>();
    m = stage_->host(3 * staged + 1).data_ptr<float>();
    v = stage_->host(3 * staged + 2).data_ptr<float>();
  } else {
    const int64_t moment = s.begin - opt_.begin();
    params = store_.params().data_ptr<float>() + s.begin;
    m = opt_.m().data_ptr<float>() + moment;
    v = opt_.v().data_ptr<float>() + moment;
  }
  return {{"params", params, n},
          {"adam_m", m, n},
          {"adam_v", v, n},
          {"buffers", s.buffer_stage.data(), s.buffer_stage.size()},
          {"rng", rng_stage_.data(), rng_stage_.size()}};
}

void MemoryCheckpoint::StageFromDevice() {
  std::vector<torch::Tensor> sources;
  for (const Slice* s : {&mine_, theirs_ ? &*theirs_ : nullptr}) {
    if (s == nullptr) continue;
    const int64_t n = s->end - s->begin, moment = s->begin - opt_.begin();
    sources.push_back(store_.params().narrow(0, s->begin, n));
    sources.push_back(opt_.m().narrow(0, moment, n));
    sources.push_back(opt_.v().narrow(0, moment, n));
  }
  stage_->Begin(sources);
}

std::string MemoryCheckpoint::Meta(const TrainState& st, const Slice& s) const {
  nlohmann::json meta = {{"step", st.step},
                         {"data_cursor", st.data_cursor},
                         {"loss", st.loss},
                         {"world_size", comm_.world_size()},
                         {"rank", s.rank},
                         {"written_by", comm_.rank()},
                         {"shape", cfg_.model.ShapeString()},
                         {"optimizer", cfg_.optimizer},
                         {"seed", cfg_.seed},
                         {"num_params", store_.num_params()},
                         {"begin", s.begin},
                         {"end", s.end},
                         {"buffer_bytes", buffer_bytes_},
                         {"buffer_begin", s.buf_begin},
                         {"buffer_end", s.buf_end},
                         {"timeline", timeline_}};
  return meta.dump();
}

// Buffers change only at POET merges; copying them every step would double
// a POET shard's size for nothing.
void MemoryCheckpoint::StageBuffers(Slice& s) {
  s.buffer_stage.resize(static_cast<size_t>(s.buf_end - s.buf_begin));
  int64_t at = 0;
  for (auto& b : model_->named_buffers()) {
    auto t = b.value().contiguous().to(torch::kCPU);  // a GPU rank's buffers: copied once per merge
    const int64_t n = t.numel() * t.element_size();
    const int64_t lo = std::max(at, s.buf_begin), hi = std::min(at + n, s.buf_end);
    if (lo < hi) std::memcpy(s.buffer_stage.data() + (lo - s.buf_begin), static_cast<uint8_t*>(t.data_ptr()) + (lo - at), hi - lo);
    at += n;
  }
}

// Disk checkpoints carry no timeline; a restore from one starts a timeline
// that only other restores from the same step share (as they should: the
// same checkpoint, the same deterministic steps after it).
void MemoryCheckpoint::ResumedFromDisk(int64_t step) { timeline_ = rank_client::NextTimeline(~uint64_t{0}, step); }

Status MemoryCheckpoint::Save(const TrainState& st) {
  BULWARK_RETURN_IF_ERROR(client_->WaitCopied());
  const bool merged = cfg_.model.poet.enabled && st.step % cfg_.model.poet.merge_every == 0;
  if (!buffers_staged_ || merged) {
    StageBuffers(mine_);
    if (theirs_) StageBuffers(*theirs_);
    buffers_staged_ = true;
  }
  // Every rank's generator is in the same state (same seed, same draws), so
  // the backup of another rank carries this one's.
  auto rng = at::detail::getDefaultCPUGenerator().get_state();
  rng_stage_.assign(rng.data_ptr<uint8_t>(), rng.data_ptr<uint8_t>() + rng.numel());
  if (stage_) StageFromDevice();
  std::vector<rank_client::ShardImageParts> images;
  images.push_back({{st.step, comm_.rank(), comm_.world_size()}, Meta(st, mine_), Sections(mine_, 0)});
  if (theirs_) images.push_back({{st.step, theirs_->rank, comm_.world_size()}, Meta(st, *theirs_), Sections(*theirs_, 1)});
  if (!region_open_) {
    std::vector<size_t> sizes;
    for (const auto& im : images) sizes.push_back(rank_client::ShardImageSize(im.sections, kMetaCapacity));
    BULWARK_RETURN_IF_ERROR(client_->OpenRegion(sizes, /*peer_writes=*/theirs_.has_value()));
    region_open_ = true;
  }
  if (!stage_) return client_->BeginSave(std::move(images));
  return client_->BeginSave(std::move(images), [stage = stage_.get()] { return stage->Wait(); });
}

// The generator refuses a state it cannot resume ("Invalid mt19937 state")
// by throwing. Met in Load, after the ranks agreed on a copy, that killed a
// standby's rank twice in a row (exit 1) and the controller evicted its
// machine; refused in Check, the copy is skipped like any other bad one.
Status ResumableGeneratorState(const void* bytes, size_t n) {
  try {
    auto state = torch::empty({static_cast<int64_t>(n)}, torch::kUInt8);
    std::memcpy(state.data_ptr(), bytes, n);
    at::make_generator<at::CPUGeneratorImpl>().set_state(state);
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    // The legacy layout's counters (seed u64, left i32, seeded i32, next
    // u64): what a damaged state looked like, for whoever reads the note.
    int32_t left = 0, seeded = 0;
    uint64_t next = 0;
    if (n >= 24) {
      std::memcpy(&left, static_cast<const uint8_t*>(bytes) + 8, 4);
      std::memcpy(&seeded, static_cast<const uint8_t*>(bytes) + 12, 4);
      std::memcpy(&next, static_cast<const uint8_t*>(bytes) + 16, 8);
    }
    return Status::Corrupt("its generator state cannot be resumed (" + what + "; " + std::to_string(n) +
                           " bytes, seeded " + std::to_string(seeded) + ", left " + std::to_string(left) + ", next " +
                           std::to_string(next) + ")");
  }
  return Status::OK();
}

Status MemoryCheckpoint::Check(const rank_client::ShardView& v, const std::string& where) const {
  nlohmann::json meta = nlohmann::json::parse(v.meta, nullptr, false);
  if (!meta.is_object()) return Status::Corrupt(where + ": unreadable meta");
  auto differs = [&](const char* key, const nlohmann::json& ours) -> Status {
    if (!meta.contains(key) || meta[key] != ours) {
      return Status::InvalidArgument(where + " has " + key + " " + (meta.contains(key) ? meta[key].dump() : "(none)") +
                                     ", this run has " + ours.dump());
    }
    return Status::OK();
  };
  BULWARK_RETURN_IF_ERROR(differs("shape", cfg_.model.ShapeString()));
  BULWARK_RETURN_IF_ERROR(differs("optimizer", cfg_.optimizer));
  BULWARK_RETURN_IF_ERROR(differs("seed", cfg_.seed));
  BULWARK_RETURN_IF_ERROR(differs("world_size", comm_.world_size()));
  BULWARK_RETURN_IF_ERROR(differs("rank", comm_.rank()));
  BULWARK_RETURN_IF_ERROR(differs("begin", begin_));
  BULWARK_RETURN_IF_ERROR(differs("end", end_));
  BULWARK_RETURN_IF_ERROR(differs("buffer_bytes", buffer_bytes_));
  const size_t n = static_cast<size_t>(end_ - begin_) * sizeof(float);
  for (const char* s : {"params", "adam_m", "adam_v"}) {
    auto it = v.sections.find(s);
    if (it == v.sections.end() || it->second.second != n) return Status::Corrupt(where + ": section " + s + " missing or mis-sized");
  }
  auto b = v.sections.find("buffers");
  if (b == v.sections.end() || b->second.second != static_cast<size_t>(buf_end_ - buf_begin_)) {
    return Status::Corrupt(where + ": section buffers missing or mis-sized");
  }
  auto rng = v.sections.find("rng");
  if (rng == v.sections.end()) return Status::Corrupt(where + ": no rng section");
  // Load would meet a state the generator refuses only after the ranks
  // agreed on this copy (ResumableGeneratorState says why that hurt).
  Status resumable = ResumableGeneratorState(rng->second.first, rng->second.second);
  if (!resumable.ok()) return Status::Corrupt(where + ": " + resumable.message());
  return Status::OK();
}

Result<std::optional<rank_client::ShardPoint>> MemoryCheckpoint::Agree(const std::vector<rank_client::ShardPoint>& mine,
                                                                   int64_t* newest) {
  // One row per rank of (step + 1, timeline's high and low 32 bits): exact
  // in doubles, summed into place.
  const int W = comm_.world_size();
  auto table = torch::zeros({W, kMaxCandidates, 3}, torch::kFloat64);
  auto row = table[comm_.rank()];
  for (size_t i = 0; i < mine.size() && i < static_cast<size_t>(kMaxCandidates); ++i) {
    row[i][0] = static_cast<double>(mine[i].step + 1);
    row[i][1] = static_cast<double>(mine[i].timeline >> 32);
    row[i][2] = static_cast<double>(mine[i].timeline & 0xffffffffu);
  }
  std::vector<torch::Tensor> v{table};
  BULWARK_RETURN_IF_ERROR(comm_.AllReduceSum(v));
  auto acc = table.accessor<double, 3>();
  std::vector<std::vector<rank_client::ShardPoint>> held(W);
  for (int r = 0; r < W; ++r)
    for (int i = 0; i < kMaxCandidates; ++i) {
      if (acc[r][i][0] < 1) continue;
      held[r].push_back({static_cast<int64_t>(acc[r][i][0]) - 1,
                         (static_cast<uint64_t>(acc[r][i][1]) << 32) | static_cast<uint64_t>(acc[r][i][2])});
    }
  return rank_client::NewestCommonPoint(held, newest);
}

Status MemoryCheckpoint::Load(const rank_client::ShardView& v, TrainState* st) {
  torch::NoGradGuard no_grad;
  nlohmann::json meta = nlohmann::json::parse(v.meta);
  const int64_t k = end_ - begin_, moment = begin_ - opt_.begin();
  CopyIn(store_.params().narrow(0, begin_, k), v.sections.at("params").first);
  CopyIn(opt_.m().narrow(0, moment, k), v.sections.at("adam_m").first);
  CopyIn(opt_.v().narrow(0, moment, k), v.sections.at("adam_v").first);
  const auto& rng = v.sections.at("rng");
  auto state = torch::empty({static_cast<int64_t>(rng.second)}, torch::kUInt8);
  std::memcpy(state.data_ptr(), rng.first, rng.second);
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(state);
  st->step = meta["step"].get<int64_t>();
  st->data_cursor = meta["data_cursor"].get<uint64_t>();
  // A non-finite loss is stored as JSON null.
  st->loss = meta["loss"].is_number() ? meta["loss"].get<double>() : std::nan("");

  // Every rank restored its slice; the all-gathers give the group the rest.
  const int W = group_.world_size();
  if (W > 1) {
    if (store_.params().is_cpu()) {
      BULWARK_RETURN_IF_ERROR(group_.AllGatherChunks(store_.params()));
    } else {  // a GPU rank gathers through the host, like the moments below
      auto host = store_.params().to(torch::kCPU);
      BULWARK_RETURN_IF_ERROR(group_.AllGatherChunks(host));
      store_.params().copy_(host);
    }
    if (!cfg_.shard_optimizer) {
      for (torch::Tensor* moment : {&opt_.m(), &opt_.v()}) {
        auto full = torch::zeros({store_.params().numel()}, torch::kFloat32);
        full.narrow(0, begin_, end_ - begin_).copy_(moment->narrow(0, begin_, end_ - begin_));
        BULWARK_RETURN_IF_ERROR(group_.AllGatherChunks(full));
        moment->copy_(full.narrow(0, 0, moment->numel()));
      }
    }
  }
  auto blob = torch::zeros({BufferFloats()}, torch::kFloat32);
  auto* bytes = reinterpret_cast<uint8_t*>(blob.data_ptr<float>());
  const auto& buf = v.sections.at("buffers");
  std::memcpy(bytes + buf_begin_, buf.first, buf.second);
  if (W > 1 && blob.numel() > 0) BULWARK_RETURN_IF_ERROR(group_.AllGatherChunks(blob));
  int64_t at = 0;
  for (auto& b : model_->named_buffers()) {
    auto& t = b.value();
    CopyIn(t, bytes + at);
    at += t.numel() * t.element_size();
  }
  buffers_staged_ = false;
  return Status::OK();
}

Result<std::optional<RestoreOutcome>> MemoryCheckpoint::Restore(TrainState* st) {
  const auto t0 = Clock::now();
  auto copies = client_->Copies();
  if (!copies.ok()) return copies.status();
  // Verified copies by index into `copies`, in the agent's order: memory,
  // then peers, then durable storage.
  std::vector<std::pair<size_t, rank_client::ShardView>> good;
  auto verify = [&](bool durable) {
    std::vector<rank_client::ShardPoint> points;
    std::string seen;
    for (size_t i = 0; i < copies->size(); ++i) {
      rank_client::ShardCopy& c = (*copies)[i];
      if ((c.source == "durable") != durable) continue;
      const std::string where = "rank " + std::to_string(comm_.rank()) + "'s " + c.source + " copy of step " +
                                std::to_string(c.info.step);
      auto view = c.Open();
      Status st = view.ok() ? Check(*view, where) : view.status();
      if (!st.ok()) {
        note_(st.message() + "; trying the next copy");
        continue;
      }
      good.emplace_back(i, *view);
      seen += " " + c.source + ":" + std::to_string(c.info.step);
    }
    for (const auto& [i, v] : good) points.push_back({v.info.step, TimelineOf(v)});
    std::sort(points.rbegin(), points.rend());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    note_("rank " + std::to_string(comm_.rank()) + " holds" + (seen.empty() ? std::string(" no usable copy") : seen) +
          (durable ? " (durable storage)" : ""));
    return points;
  };
  int64_t newest = -1;
  auto agreed = Agree(verify(false), &newest);
  if (!agreed.ok()) return agreed.status();
  if (!*agreed) {
    // No step every rank holds in memory: fall back to durable storage.
    agreed = Agree(verify(true), &newest);
    if (!agreed.ok()) return agreed.status();
  }
  if (!*agreed) {
    good.clear();
    copies->clear();
    client_->ReleaseCopies();
    return std::optional<RestoreOutcome>();
  }
  const int64_t step = (*agreed)->step;
  const uint64_t timeline = (*agreed)->timeline;

  RestoreOutcome out;
  out.step = step;
  std::string mine;
  for (const auto& [i, v] : good) {
    if (v.info.step != step || TimelineOf(v) != timeline) continue;
    mine = (*copies)[i].source;
    BULWARK_RETURN_IF_ERROR(Load(v, st));
    break;
  }
  // Cannot happen (the point was agreed from this rank's own list), but if it
  // did the others would wait in Load's all-gathers: say so before they time out.
  if (mine.empty()) return Status::Internal("rank " + std::to_string(comm_.rank()) + " lost its copy of the agreed step " + std::to_string(step));
  timeline_ = rank_client::NextTimeline(timeline, step);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

  // Everyone learns every rank's source and time: rank 0 reports them.
  const int W = comm_.world_size();
  auto table = torch::zeros({W, 2}, torch::kFloat64);
  table[comm_.rank()][0] = SourceRank(mine);
  table[comm_.rank()][1] = ms;
  std::vector<torch::Tensor> v{table};
  BULWARK_RETURN_IF_ERROR(comm_.AllReduceSum(v));
  const char* names[] = {"memory", "peer", "durable"};
  int worst = 0;
  for (int r = 0; r < W; ++r) {
    int s = static_cast<int>(table[r][0].item<double>());
    out.sources.push_back(names[s]);
    worst = std::max(worst, s);
    out.ms = std::max(out.ms, table[r][1].item<double>());
  }
  out.source = names[worst];
  out.newest_step = newest;
  // The agent keeps its copies; this process's mappings of them can go.
  good.clear();
  copies->clear();
  client_->ReleaseCopies();
  return std::optional<RestoreOutcome>(out);
}

}  // namespace bulwark::trainer
