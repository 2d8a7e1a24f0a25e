#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <mutex>

namespace bulwark {
namespace {

spdlog::level::level_enum LevelFromEnv() {
  const char* v = std::getenv("BULWARK_LOG_LEVEL");
  if (v == nullptr || *v == '\0') return spdlog::level::info;
  // from_str gives "off" for a name it does not know: a typo must not silence the log.
  const spdlog::level::level_enum l = spdlog::level::from_str(v);
  return l == spdlog::level::off && std::string(v) != "off" ? spdlog::level::info : l;
}

std::shared_ptr<spdlog::logger> Make(const std::string& name) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (std::shared_ptr<spdlog::logger> l = spdlog::get(name)) return l;
  // One sink for every logger: its mutex orders lines from all threads.
  static const auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto l = std::make_shared<spdlog::logger>(name, sink);
  l->set_pattern("%Y-%m-%d %H:%M:%S.%e [%n] %l: %v");
  l->set_level(LevelFromEnv());
  l->flush_on(spdlog::level::trace);  // every line: see log.h
  spdlog::register_logger(l);
  return l;
}

}  // namespace

Logger::Logger(const std::string& name) : impl_(Make(name)) {}

void Logger::Debug(const std::string& line) const { impl_->debug("{}", line); }
void Logger::Info(const std::string& line) const { impl_->info("{}", line); }
void Logger::Warn(const std::string& line) const { impl_->warn("{}", line); }
void Logger::Error(const std::string& line) const { impl_->error("{}", line); }
const std::string& Logger::name() const { return impl_->name(); }

}  // namespace bulwark
