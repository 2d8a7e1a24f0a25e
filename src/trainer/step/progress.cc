#include "trainer/step/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace bulwark::trainer {
namespace {

std::string Duration(double s) {
  char buf[32];
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, int(s) % 3600 / 60);
  return buf;
}

}  // namespace

Progress::Progress(bool json, bool enabled, int64_t log_every)
    : json_(json), enabled_(enabled), tty_(::isatty(2) != 0), log_every_(log_every) {}

void Progress::Emit(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

void Progress::ClearLine() {
  if (line_open_) std::fputs(tty_ ? "\r\033[K" : "", stderr);
  line_open_ = false;
}

void Progress::Start(const nlohmann::json& info) {
  if (!enabled_) return;
  if (json_) {
    nlohmann::json j = info;
    j["event"] = "start";
    j["wall_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
    Emit(j);
    return;
  }
  std::fprintf(stderr, "bulwark-train: %s parameters, world size %s, %s steps from step %s\n",
               info["params"].dump().c_str(), info["world_size"].dump().c_str(), info["steps"].dump().c_str(),
               info["start_step"].dump().c_str());
}

void Progress::Step(const StepReport& r) {
  if (!enabled_) return;
  ema_ms_ = ema_ms_ == 0 ? r.step_ms : 0.9 * ema_ms_ + 0.1 * r.step_ms;
  if (json_) {
    if (r.step % log_every_ == 0 || r.step == r.total) {
      nlohmann::json j = {{"event", "step"}, {"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                          {"step_ms", r.step_ms}, {"tokens_per_s", r.tokens_per_s}, {"forward_ms", r.forward_ms},
                          {"backward_ms", r.backward_ms}, {"comm_ms", r.comm_ms}, {"optimizer_ms", r.optimizer_ms},
                          // Wall clock: a supervisor's benchmarks time recovery
                          // against the moment a fault was injected.
                          {"wall_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::system_clock::now().time_since_epoch()).count()}};
      if (r.ckpt_block_ms >= 0) j["ckpt_block_ms"] = r.ckpt_block_ms;
      if (r.ckpt_copy_cpu_ms >= 0) j["ckpt_copy_cpu_ms"] = r.ckpt_copy_cpu_ms;
      if (!r.checksum.empty()) j["checksum"] = r.checksum;
      Emit(j);
    }
    return;
  }
  auto now = std::chrono::steady_clock::now();
  // Off a terminal, a line every 5 s keeps logs readable; on one, redraw.
  double since = std::chrono::duration<double>(now - last_print_).count();
  if (!tty_ && since < 5.0 && r.step != r.total) return;
  if (tty_ && since < 0.1 && r.step != r.total) return;
  last_print_ = now;
  double eta = ema_ms_ * static_cast<double>(r.total - r.step) / 1000.0;
  char buf[256];
  int pct = static_cast<int>(100.0 * static_cast<double>(r.step) / static_cast<double>(r.total));
  std::string val = last_val_ >= 0 ? " | val " + std::to_string(last_val_).substr(0, 6) : "";
  std::snprintf(buf, sizeof buf, "step %lld/%lld %3d%% | loss %.4f%s | %.0f tok/s | %.0f ms/step | ETA %s",
                static_cast<long long>(r.step), static_cast<long long>(r.total), pct, r.loss, val.c_str(),
                r.tokens_per_s, ema_ms_, Duration(eta).c_str());
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", buf);
    line_open_ = true;
  } else {
    std::fprintf(stderr, "%s\n", buf);
  }
  std::fflush(stderr);
}

void Progress::Eval(int64_t step, double val_loss) {
  last_val_ = val_loss;
  if (!enabled_) return;
  if (json_) {
    Emit({{"event", "eval"}, {"step", step}, {"val_loss", val_loss}, {"val_ppl", std::exp(val_loss)}});
    return;
  }
  ClearLine();
  std::fprintf(stderr, "eval  step %lld: val loss %.4f, perplexity %.2f\n", static_cast<long long>(step), val_loss,
               std::exp(val_loss));
}

void Progress::Note(const std::string& line) {
  if (!enabled_) return;
  if (json_) {
    Emit({{"event", "note"}, {"message", line}});
    return;
  }
  ClearLine();
  std::fprintf(stderr, "%s\n", line.c_str());
}

void Progress::PoetDiagnostics(int64_t step, const nlohmann::json& diag) {
  if (!enabled_) return;
  if (json_) {
    nlohmann::json j = diag;
    j["event"] = "poet_diag";
    j["step"] = step;
    Emit(j);
    return;
  }
  ClearLine();
  std::fprintf(stderr, "poet  step %lld: max orthogonality error %.2e, max spectrum drift %.2e, probe %.3f\n",
               static_cast<long long>(step), diag["max_orth_error"].get<double>(),
               diag["max_spectrum_drift"].get<double>(), diag["mean_probe"].get<double>());
}

void Progress::Done(int64_t step, double loss, const std::string& checksum, double seconds) {
  if (enabled_ && !json_) {
    ClearLine();
    std::fprintf(stderr, "done: %lld steps in %s, final loss %.4f%s, parameters %s\n", static_cast<long long>(step),
                 Duration(seconds).c_str(), loss,
                 last_val_ >= 0 ? (", val loss " + std::to_string(last_val_).substr(0, 6)).c_str() : "",
                 checksum.c_str());
  }
  // Every rank prints this line, enabled or not: it is the contract.
  Emit({{"event", "done"}, {"step", step}, {"loss", loss}, {"param_checksum", checksum}});
}

}  // namespace bulwark::trainer
