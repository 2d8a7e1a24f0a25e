#include "trainer/model/params.h"

#include "common/checksum.h"

namespace bulwark::trainer {

namespace {
std::vector<std::pair<std::string, torch::Tensor>> AllParameters(torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& p : module.named_parameters(/*recurse=*/true)) out.emplace_back(p.key(), p.value());
  return out;
}
}  // namespace

ParamStore::ParamStore(torch::nn::Module& module, int64_t padded_to) : ParamStore(AllParameters(module), padded_to) {}

ParamStore::ParamStore(const std::vector<std::pair<std::string, torch::Tensor>>& named, int64_t padded_to) {
  std::vector<std::pair<std::string, torch::Tensor>> decay, no_decay, poet;
  for (auto& [key, value] : named) {
    if (key.find(".poet.") != std::string::npos) poet.emplace_back(key, value);
    else (value.dim() >= 2 ? decay : no_decay).emplace_back(key, value);
  }

  int64_t n = 0;
  auto add_group = [&](const char* name, auto& list, bool wd, bool is_poet) {
    int64_t begin = n;
    for (auto& [pname, t] : list) {
      entries_.push_back({pname, n, t.numel(), t.sizes().vec()});
      n += t.numel();
    }
    groups_.push_back({name, begin, n, wd, is_poet});
  };
  add_group("decay", decay, true, false);
  add_group("no_decay", no_decay, false, false);
  add_group("poet", poet, false, true);  // POET parameters never decay
  num_params_ = n;

  int64_t padded = (n + padded_to - 1) / padded_to * padded_to;
  // On the parameters' device (the model is moved before the store is
  // built, train.cc): the CPU, or a CUDA rank's GPU.
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(named.empty() ? torch::kCPU : named.front().second.device());
  params_ = torch::zeros({padded}, opts);
  grads_ = torch::zeros({n + 1}, opts);

  torch::NoGradGuard no_grad;
  size_t i = 0;
  for (auto* list : {&decay, &no_decay, &poet}) {
    for (auto& [pname, t] : *list) {
      const ParamEntry& e = entries_[i++];
      auto pview = params_.narrow(0, e.offset, e.numel).view(e.shape);
      pview.copy_(t);
      t.set_data(pview);
      // A defined gradient is accumulated into in place by autograd (no grad
      // mode during backward), so backward writes straight into the flat buffer.
      t.mutable_grad() = grads_.narrow(0, e.offset, e.numel).view(e.shape);
    }
  }
}

std::string ParamStore::Checksum(const std::vector<torch::Tensor>& state) {
  bulwark::Checksum sum;
  auto p = ParamsView().contiguous();
  if (!p.is_cpu()) p = p.cpu();  // a CUDA rank: the same bytes, copied to the host
  sum.Update(p.data_ptr<float>(), static_cast<size_t>(p.numel()) * sizeof(float));
  for (const auto& t : state) {
    auto c = t.contiguous();
    if (!c.is_cpu()) c = c.cpu();
    sum.Update(c.data_ptr(), static_cast<size_t>(c.numel() * c.element_size()));
  }
  return sum.HexDigest();
}

}  // namespace bulwark::trainer
