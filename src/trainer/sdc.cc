#include "trainer/sdc.h"

#include <cmath>
#include <cstdlib>

namespace bulwark::trainer {

std::optional<Sdc> Sdc::Parse(const std::string& spec) {
  const size_t colon = spec.find(':');
  Sdc s;
  s.mode_ = spec.substr(0, colon);
  if (s.mode_ != "nan" && s.mode_ != "drift") return std::nullopt;
  if (colon != std::string::npos) {
    char* end = nullptr;
    const std::string r = spec.substr(colon + 1);
    s.rate_ = std::strtod(r.c_str(), &end);
    if (r.empty() || *end != '\0' || !(s.rate_ > 0 && s.rate_ <= 1)) return std::nullopt;
  }
  return s;
}

std::optional<Sdc> Sdc::FromEnv() {
  const char* v = std::getenv("BULWARK_SDC");
  return v == nullptr ? std::nullopt : Parse(v);
}

void Sdc::Corrupt(torch::Tensor& t) {
  if (t.numel() == 0) return;
  if (std::uniform_real_distribution<double>(0, 1)(rng_) >= rate_) return;
  const int64_t i = static_cast<int64_t>(rng_() % static_cast<uint64_t>(t.numel()));
  auto e = t.view({-1})[i];
  if (mode_ == "nan") {
    e.fill_(std::nanf(""));
  } else {
    // Never a no-op: a zero gradient drifts to a tiny value instead.
    const float v = e.item<float>();
    e.fill_(v == 0.0f ? 1e-6f : v * 1.001f);
  }
}

}  // namespace bulwark::trainer
