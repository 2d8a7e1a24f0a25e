// One pipeline stage (pipeline_stage.h): activations forward and their
// gradients back between neighbouring stages, point to point.
#include "trainer/step/pipeline_stage.h"

#include <torch/torch.h>

#include <chrono>

#include "common/checksum.h"
#include "trainer/model/kernels.h"
#include "trainer/step/progress.h"
#include "trainer/step/train_loop.h"

namespace bulwark::trainer {
namespace {

using Clock = std::chrono::steady_clock;


// Tags of point-to-point messages: activations of micro-batch m travel with
// 2m, their gradients with 2m + 1; evaluation uses its own range.
constexpr int kEvalTag = 1 << 24;

}  // namespace

Status Stage::Forward(int m, const torch::Tensor& idx, const torch::Tensor& targets, double loss_scale) {
  Saved s;
  torch::Tensor h;
  if (layers_.embed) {
    h = model_->Embed(OnDevice(idx, device_));
  } else {
    s.input = Activations(mb_);
    auto t0 = Clock::now();
    BULWARK_RETURN_IF_ERROR(world_.Recv(s.input, Prev(), 2 * m));
    wait_ms += Ms(t0, Clock::now());
    s.input.requires_grad_(true);
    h = s.input;
  }
  h = model_->Body(h, layers_.first, layers_.last);
  if (layers_.head) {
    auto logits = model_->Head(h);
    auto loss = CrossEntropyLoss(logits, OnDevice(targets, device_));
    last_loss = loss.item<double>();
    loss_sum += last_loss;
    s.output = loss * loss_scale;  // the step's loss is the mean over micro-batches
  } else {
    s.output = h;
    BULWARK_RETURN_IF_ERROR(world_.Send(h.detach(), Next(), 2 * m));
  }
  saved_[m] = std::move(s);
  return Status::OK();
}

Status Stage::Backward(int m) {
  Saved s = std::move(saved_[m]);
  saved_.erase(m);
  if (layers_.head) {
    s.output.backward();
  } else {
    auto grad = Activations(mb_);
    auto t0 = Clock::now();
    BULWARK_RETURN_IF_ERROR(world_.Recv(grad, Next(), 2 * m + 1));
    wait_ms += Ms(t0, Clock::now());
    s.output.backward(grad);
  }
  if (!layers_.embed) BULWARK_RETURN_IF_ERROR(world_.Send(s.input.grad(), Prev(), 2 * m + 1));
  return Status::OK();
}

Result<double> Stage::EvalForward(int tag, const torch::Tensor& idx, const torch::Tensor& targets, int B) {
  torch::NoGradGuard no_grad;
  torch::Tensor h;
  if (layers_.embed) {
    h = model_->Embed(OnDevice(idx, device_));
  } else {
    h = Activations(B);
    BULWARK_RETURN_IF_ERROR(world_.Recv(h, Prev(), kEvalTag + tag));
  }
  h = model_->Body(h, layers_.first, layers_.last);
  if (!layers_.head) {
    BULWARK_RETURN_IF_ERROR(world_.Send(h, Next(), kEvalTag + tag));
    BULWARK_RETURN_IF_ERROR(world_.WaitSends());
    return 0.0;
  }
  return CrossEntropyLoss(model_->Head(h), OnDevice(targets, device_)).item<double>();
}

torch::Tensor Stage::Activations(int64_t B) const {
  return torch::empty({B, T_, model_->cfg.d_model}, torch::TensorOptions().device(device_));
}

torch::Tensor Stage::CrossEntropyLoss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return kernels::CrossEntropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
}

// The halves travel as doubles, which hold 32-bit integers exactly.
Result<std::string> PipelineChecksum(Comm& world, const PipelineCoords& c, ParamStore& store) {
  std::string mine = store.Checksum();
  auto t = torch::zeros({2 * c.pp_size}, torch::kFloat64);
  if (c.dp == 0) {
    uint64_t v = std::stoull(mine, nullptr, 16);
    t[2 * c.pp] = static_cast<double>(v >> 32);
    t[2 * c.pp + 1] = static_cast<double>(v & 0xffffffffu);
  }
  std::vector<torch::Tensor> v{t};
  BULWARK_RETURN_IF_ERROR(world.AllReduceSum(v));
  bulwark::Checksum sum;
  for (int s = 0; s < c.pp_size; ++s) {
    uint64_t x = (static_cast<uint64_t>(t[2 * s].item<double>()) << 32) |
                 static_cast<uint64_t>(t[2 * s + 1].item<double>());
    sum.Update(&x, sizeof x);
  }
  return sum.HexDigest();
}

}  // namespace bulwark::trainer
