#include "trainer/diag/sdc.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

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

namespace {

std::string FirstLineOf(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::optional<Sdc> Sdc::FromEnv() {
  if (const char* v = std::getenv("BULWARK_SDC")) return Parse(v);
  if (const char* f = std::getenv("BULWARK_SDC_FILE")) return Parse(FirstLineOf(f));
  return std::nullopt;
}

std::optional<SdcFile> SdcFile::FromEnv() {
  const char* f = std::getenv("BULWARK_SDC_FILE");
  if (f == nullptr || *f == '\0') return std::nullopt;
  SdcFile s;
  s.path_ = f;
  s.seen_ns_ = s.Stamp();
  return s;
}

int64_t SdcFile::Stamp() const {
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) return -2;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

void SdcFile::Poll(std::optional<Sdc>& sdc) {
  const int64_t ns = Stamp();
  if (ns == seen_ns_) return;
  seen_ns_ = ns;
  sdc = ns == -2 ? std::nullopt : Sdc::Parse(FirstLineOf(path_));
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
