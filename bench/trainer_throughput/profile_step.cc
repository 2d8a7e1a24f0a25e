// Where a training step's time goes, op by op: the small model (or any
// bulwark-train config) with random tokens, a few warm-up steps, then
// libtorch's profiler over the timed steps. Prints self time per op (and per
// input shape for matmuls), forward and backward together, sorted.
//
//   build/bin/bulwark-train-profile [--precision bf16|fp32] [--threads 2] [--steps 5] [--vocab 2048]
//
// Self time: an op's time minus the ops it called, so the column sums to the
// step (apart from Python-free glue such as the optimizer, not profiled here).
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "trainer/config.h"
#include "trainer/model/model.h"
#include "trainer/model/params.h"

using namespace bulwark::trainer;
namespace prof = torch::autograd::profiler;

int main(int argc, char** argv) {
  std::string precision = "bf16";
  int threads = 2, steps = 5, vocab = 2048, batch = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--precision") precision = v;
    else if (k == "--threads") threads = std::stoi(v);
    else if (k == "--steps") steps = std::stoi(v);
    else if (k == "--vocab") vocab = std::stoi(v);
    else if (k == "--batch-size") batch = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  at::set_num_threads(threads);
  auto cfg = *Preset("small");
  cfg.model.vocab_size = vocab;
  cfg.model.bf16 = precision == "bf16";
  Transformer model(cfg.model);
  model->Initialize(1);
  ParamStore store(*model);
  if (cfg.model.bf16) model->UseBf16Shadow(store.params());
  const int T = cfg.model.context;
  auto idx = torch::randint(0, vocab, {batch, T}, torch::kInt64);
  auto tgt = torch::randint(0, vocab, {batch, T}, torch::kInt64);
  auto step = [&] {
    store.ZeroGrad();
    model->Loss(idx, tgt).backward();
  };
  for (int i = 0; i < 3; ++i) step();

  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  double plain_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;

  prof::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU,
                                                                    /*report_input_shapes=*/true));
  for (int i = 0; i < steps; ++i) step();
  auto lists = prof::disableProfilerLegacy();

  struct Agg {
    double self_us = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Agg> by_op;
  double total_us = 0;
  for (auto& list : lists) {
    struct Open {
      const prof::LegacyEvent* ev;
      double child_us;
      std::string key;
    };
    std::vector<Open> stack;
    for (auto& ev : list) {
      if (ev.kind() == prof::EventKind::PushRange) {
        std::string key = ev.name();
        if (key == "aten::mm" || key == "aten::bmm" || key == "aten::addmm" || key == "aten::matmul" ||
            key == "aten::linear") {
          key += " [";
          for (auto& s : ev.shapes()) {
            key += "(";
            for (size_t d = 0; d < s.size(); ++d) key += (d ? "x" : "") + std::to_string(s[d]);
            key += ")";
          }
          key += "]";
        }
        stack.push_back({&ev, 0.0, key});
      } else if (ev.kind() == prof::EventKind::PopRange && !stack.empty()) {
        Open o = stack.back();
        stack.pop_back();
        double us = o.ev->cpuElapsedUs(ev);
        auto& a = by_op[o.key];
        a.self_us += us - o.child_us;
        a.calls += 1;
        if (!stack.empty()) stack.back().child_us += us;
        else total_us += us;
      }
    }
  }
  std::vector<std::pair<std::string, Agg>> rows(by_op.begin(), by_op.end());
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.self_us > b.second.self_us; });
  std::printf("precision %s, %d threads, batch %d x %d, vocab %d: %.1f ms/step unprofiled (forward+backward)\n",
              precision.c_str(), threads, batch, T, vocab, plain_ms);
  std::printf("%10s %6s %7s  %s\n", "self ms", "%", "calls", "op");
  for (auto& [name, a] : rows) {
    double ms = a.self_us / 1000.0 / steps;
    if (ms < 0.05) continue;
    std::printf("%10.2f %5.1f%% %7.1f  %s\n", ms, 100.0 * a.self_us / total_us, double(a.calls) / steps, name.c_str());
  }
  std::printf("%10.2f        total profiled per step\n", total_us / 1000.0 / steps);
  return 0;
}
