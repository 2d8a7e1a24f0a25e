#include "agent/monitor.h"

#include <sys/stat.h>

#include <cstdio>

#include <nlohmann/json.hpp>

namespace bulwark::agent {
namespace {
constexpr size_t kTailLines = 40;
}

LogFollower::LogFollower(std::string path, std::shared_ptr<const ProgressPattern> progress)
    : path_(std::move(path)), pattern_(std::move(progress)) {
  struct stat st;
  if (::stat(path_.c_str(), &st) == 0) offset_ = static_cast<uint64_t>(st.st_size);
}

void LogFollower::Poll() {
  FILE* f = std::fopen(path_.c_str(), "rb");
  if (f == nullptr) return;
  if (std::fseek(f, static_cast<long>(offset_), SEEK_SET) == 0) {
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
      offset_ += n;
      partial_.append(buf, n);
    }
  }
  std::fclose(f);
  size_t start = 0, nl;
  while ((nl = partial_.find('\n', start)) != std::string::npos) {
    Consume(partial_.substr(start, nl - start));
    start = nl + 1;
  }
  partial_.erase(0, start);
}

void LogFollower::Consume(const std::string& line) {
  tail_.push_back(line);
  if (tail_.size() > kTailLines) tail_.pop_front();
  if (pattern_) {
    if (std::optional<ProgressMatch> m = pattern_->Match(line)) {
      last_step_ = m->step;
      progress_.push_back({*m, std::chrono::system_clock::now()});
      return;
    }
  }
  if (line.empty() || line[0] != '{') return;
  // Only the trainer's own JSON lines; anything else is just log text.
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("event") || !j.contains("step")) return;
  if (!j["step"].is_number_integer()) return;
  const std::string ev = j["event"].is_string() ? j["event"].get<std::string>() : "";
  if (ev == "step") last_step_ = j["step"].get<int64_t>();
  if (ev == "done") done_step_ = j["step"].get<int64_t>();
  if (ev == "restore") {
    restore_ = Restore{j["step"].get<int64_t>(), j.value("newest_step", j["step"].get<int64_t>()),
                       j.value("source", std::string("unknown")), j.value("ms", 0.0)};
  }
}

}  // namespace bulwark::agent
