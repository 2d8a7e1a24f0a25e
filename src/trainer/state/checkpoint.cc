#include "trainer/state/checkpoint.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "rank_client/shard_client.h"
#include "trainer/state/checkpoint_dir.h"
#include "trainer/step/progress.h"

namespace bulwark::trainer {
namespace {

// A CUDA rank's tensors go through host memory; CPU tensors are used as they are.
torch::Tensor OnHost(const torch::Tensor& t) {
  auto c = t.contiguous();
  return c.is_cpu() ? c : c.cpu();
}

void AddFloats(RecordWriter& w, const std::string& name, const torch::Tensor& t) {
  auto c = OnHost(t);
  w.Add(name, c.data_ptr<float>(), static_cast<size_t>(c.numel()) * sizeof(float));
}

Status CopyFloats(const RecordReader& r, const std::string& name, int64_t src_offset, torch::Tensor dst) {
  auto bytes = r.Get(name);
  if (!bytes.ok()) return bytes.status();
  size_t need = static_cast<size_t>(src_offset + dst.numel()) * sizeof(float);
  if (bytes->size() < need) return Status::Corrupt(r.where() + ": section '" + name + "' is too short");
  if (!dst.is_cpu()) {
    auto host = torch::empty(dst.sizes(), dst.options().device(torch::kCPU));
    std::memcpy(host.data_ptr<float>(), bytes->data() + src_offset * sizeof(float), dst.numel() * sizeof(float));
    torch::NoGradGuard no_grad;
    dst.copy_(host);
    return Status::OK();
  }
  std::memcpy(dst.data_ptr<float>(), bytes->data() + src_offset * sizeof(float), dst.numel() * sizeof(float));
  return Status::OK();
}

// A writer exists for each stage's data-parallel rank 0 always (rank 0
// without a pipeline), and for every rank when sharded.
bool WritesShard(const TrainConfig& cfg, int rank, int world, int stages) {
  return rank % (world / stages) == 0 || cfg.shard_optimizer;
}

}  // namespace

Status SaveCheckpoint(const TrainConfig& cfg, Comm& comm, torch::nn::Module& model, ParamStore& store, AdamW& opt,
                      const TrainState& st, int stages) {
  std::string step_dir = JoinPath(cfg.ckpt_dir, StepDirName(st.step));
  Status local = MakeDirs(step_dir);
  const int W = comm.world_size(), dp_size = W / stages, stage = comm.rank() / dp_size;
  const bool holds_params = comm.rank() % dp_size == 0;
  if (local.ok() && WritesShard(cfg, comm.rank(), W, stages)) {
    nlohmann::json meta = {
        {"step", st.step},           {"world_size", comm.world_size()}, {"rank", comm.rank()},
        {"shape", cfg.model.ShapeString()}, {"optimizer", cfg.optimizer}, {"seed", cfg.seed},
        {"data_cursor", st.data_cursor}, {"loss", st.loss}, {"num_params", store.num_params()},
        {"opt_begin", opt.begin()},  {"opt_end", std::min(opt.end(), store.num_params())},
        {"has_params", holds_params}, {"stage", stage}, {"stages", stages}};
    if (holds_params) {
      // Where each named parameter lives in "params", for tools that read
      // checkpoints without this code (bench/poet_quality's spectra).
      nlohmann::json layout = nlohmann::json::array();
      for (const ParamEntry& e : store.entries()) layout.push_back({{"name", e.name}, {"offset", e.offset}, {"shape", e.shape}});
      meta["layout"] = layout;
    }
    RecordWriter w("ckpt");
    w.Add("meta", meta.dump());
    if (holds_params) {
      AddFloats(w, "params", store.ParamsView());
      for (auto& b : model.named_buffers()) {
        auto t = OnHost(b.value());
        w.Add("buffer:" + b.key(), t.data_ptr(), static_cast<size_t>(t.numel() * t.element_size()));
      }
    }
    int64_t n = std::min(opt.end(), store.num_params()) - opt.begin();
    AddFloats(w, "adam_m", opt.m().narrow(0, 0, std::max<int64_t>(n, 0)));
    AddFloats(w, "adam_v", opt.v().narrow(0, 0, std::max<int64_t>(n, 0)));
    auto rng = at::detail::getDefaultCPUGenerator().get_state();
    w.Add("rng", rng.data_ptr(), static_cast<size_t>(rng.numel()));
    local = w.WriteAtomic(JoinPath(step_dir, ShardFileName(comm.rank())));
  }
  // Every rank learns whether every file landed before rank 0 marks the
  // checkpoint complete: a failed write anywhere leaves it incomplete.
  auto ok = torch::tensor({local.ok() ? 0.0f : 1.0f});
  std::vector<torch::Tensor> v{ok};
  BULWARK_RETURN_IF_ERROR(comm.AllReduceSum(v));
  if (!local.ok()) return local.Annotate("saving checkpoint");
  if (ok.item<float>() != 0.0f) return Status::IOError("saving checkpoint: another rank failed to write its shard");
  if (comm.rank() != 0) return Status::OK();
  std::vector<std::string> files;
  for (int r = 0; r < comm.world_size(); ++r)
    if (WritesShard(cfg, r, comm.world_size(), stages)) files.push_back(ShardFileName(r));
  BULWARK_RETURN_IF_ERROR(WriteCompleteMarker(step_dir, st.step, comm.world_size(), files));
  BULWARK_RETURN_IF_ERROR(PruneCheckpoints(cfg.ckpt_dir, cfg.ckpt_keep));
  // Rank 0 announces every complete checkpoint on stdout (even in human
  // mode): supervisors learn the newest restorable step from it.
  Progress::Emit({{"event", "checkpoint"}, {"step", st.step}, {"dir", step_dir}});
  return Status::OK();
}

Result<std::optional<TrainState>> LoadCheckpoint(const TrainConfig& cfg, Comm& comm, torch::nn::Module& model,
                                                 ParamStore& store, AdamW& opt,
                                                 const std::function<void(const std::string&)>& note,
                                                 int stages) {
  const int stage = comm.rank() / (comm.world_size() / stages);
  // Completed checkpoints that failed verification, "step-00000040 (why)".
  // An interrupted save (no marker) is not among them: it never promised a
  // state, so a run killed during its first save may still start over.
  std::vector<std::string> rejected;
  const std::optional<int64_t> at_most = rank_client::RestoreAtMost();
  auto found = FindNewestValid(
      cfg.ckpt_dir,
      [&](const std::string& dir, const Status& why) {
        note("checkpoint " + dir + " skipped: " + why.message());
        if (HasCompleteMarker(dir)) rejected.push_back(dir.substr(dir.rfind('/') + 1) + " (" + why.message() + ")");
      },
      at_most);
  // Starting from step 0 when completed checkpoints exist but none verifies
  // would silently throw away every trained step: refuse unless asked.
  constexpr double kNone = -1.0, kRefuse = -2.0;
  const bool refuse = !found && !rejected.empty() && !cfg.allow_fresh_start;
  // All ranks read the same directory, but a file may change between their
  // reads; they must agree on one step, on none, or on refusing.
  auto step = torch::tensor({found ? static_cast<double>(found->step) : refuse ? kRefuse : kNone}, torch::kFloat64);
  auto mine = step.clone();
  BULWARK_RETURN_IF_ERROR(comm.Broadcast(step, 0));
  if (!mine.equal(step)) {
    return Status::FailedPrecondition("ranks disagree on the newest valid checkpoint in " + cfg.ckpt_dir +
                                      " (rank 0 chose step " + std::to_string(step.item<int64_t>()) + ")");
  }
  if (refuse) {
    std::string list;
    for (const std::string& r : rejected) list += (list.empty() ? "" : "; ") + r;
    return Status::FailedPrecondition("--resume found no valid checkpoint in " + cfg.ckpt_dir + ", only rejected ones: " +
                                      list + "; repair or move them, or pass --allow-fresh-start to train from step 0");
  }
  // A rollback (a drifting machine found): the later states may hold the
  // drift; once every rank has chosen, they go.
  if (at_most && comm.rank() == 0) {
    BULWARK_RETURN_IF_ERROR(RemoveCheckpointsAfter(cfg.ckpt_dir, *at_most));
    note("rolled back: checkpoints after step " + std::to_string(*at_most) + " removed from " + cfg.ckpt_dir);
  }
  if (!found) return std::optional<TrainState>();

  TrainState st;
  st.step = found->step;
  bool have_params = false;
  int64_t want_b = opt.begin(), want_e = std::min(opt.end(), store.num_params());
  int64_t covered = 0;
  for (const RecordReader& r : found->shards) {
    nlohmann::json meta;
    try {
      meta = nlohmann::json::parse(*r.Get("meta"));
    } catch (const std::exception& e) {
      return Status::Corrupt(r.where() + ": unreadable meta: " + e.what());
    }
    auto mismatch = [&](const std::string& what, const std::string& theirs, const std::string& ours) {
      return Status::InvalidArgument("checkpoint " + r.where() + " has " + what + " " + theirs + " but this run has " +
                                     ours + "; resume with matching settings or use another --ckpt-dir");
    };
    const int their_stages = meta.value("stages", 1);
    if (their_stages != stages) {
      return mismatch("--pp", std::to_string(their_stages), std::to_string(stages));
    }
    if (meta.value("stage", 0) != stage) continue;  // another pipeline stage's parameters
    if (meta["shape"] != cfg.model.ShapeString())
      return mismatch("model shape", meta["shape"].get<std::string>(), cfg.model.ShapeString());
    if (meta["optimizer"] != cfg.optimizer)
      return mismatch("optimizer", meta["optimizer"].get<std::string>(), cfg.optimizer);
    if (meta["seed"].get<uint64_t>() != cfg.seed)
      return mismatch("seed", meta["seed"].dump(), std::to_string(cfg.seed));
    st.data_cursor = meta["data_cursor"].get<uint64_t>();
    if (meta["loss"].is_number()) st.loss = meta["loss"].get<double>();
    if (meta["has_params"].get<bool>()) {
      BULWARK_RETURN_IF_ERROR(CopyFloats(r, "params", 0, store.ParamsView()));
      torch::NoGradGuard no_grad;
      for (auto& b : model.named_buffers()) {
        auto bytes = r.Get("buffer:" + b.key());
        if (!bytes.ok()) return bytes.status();
        auto& t = b.value();
        if (bytes->size() != static_cast<size_t>(t.numel() * t.element_size())) {
          // POET's cumulative rotation exists only when diagnostics are on;
          // turning them on or off across a resume restarts the probe.
          if (b.key().size() > 6 && b.key().substr(b.key().size() - 6) == ".r_cum") continue;
          return Status::InvalidArgument(r.where() + ": buffer " + b.key() + " holds " +
                                         std::to_string(bytes->size()) + " bytes, this model expects " +
                                         std::to_string(t.numel() * t.element_size()) +
                                         "; resume with the settings that wrote it");
        }
        if (t.is_cpu()) {
          std::memcpy(t.data_ptr(), bytes->data(), bytes->size());
        } else {
          auto host = torch::empty(t.sizes(), t.options().device(torch::kCPU));
          std::memcpy(host.data_ptr(), bytes->data(), bytes->size());
          t.copy_(host);
        }
      }
      auto rng = r.Get("rng");
      auto state = torch::empty({static_cast<int64_t>(rng->size())}, torch::kUInt8);
      std::memcpy(state.data_ptr(), rng->data(), rng->size());
      at::Generator gen = at::detail::getDefaultCPUGenerator();  // a handle: shares the default
      gen.set_state(state);
      have_params = true;
    }
    int64_t b = meta["opt_begin"].get<int64_t>(), e = meta["opt_end"].get<int64_t>();
    int64_t ob = std::max(b, want_b), oe = std::min(e, want_e);
    if (ob < oe) {
      BULWARK_RETURN_IF_ERROR(CopyFloats(r, "adam_m", ob - b, opt.m().narrow(0, ob - want_b, oe - ob)));
      BULWARK_RETURN_IF_ERROR(CopyFloats(r, "adam_v", ob - b, opt.v().narrow(0, ob - want_b, oe - ob)));
      covered += oe - ob;
    }
  }
  if (!have_params) return Status::Corrupt(found->dir + " holds no parameters (rank-0.bin missing from its marker)");
  if (covered != want_e - want_b) {
    return Status::Corrupt(found->dir + ": the optimizer state of parameters [" + std::to_string(want_b) + ", " +
                           std::to_string(want_e) + ") is not fully covered by its shards");
  }
  return std::optional<TrainState>(st);
}

}  // namespace bulwark::trainer
