// Logging for the long-running processes, the controller and the agents:
// spdlog loggers with a per-component name ("controller", "agent.m01",
// "shard.m01"), a level, and a millisecond timestamp on every line:
//
//   2026-11-23 03:10:00.123 [agent.m01] warn: rank 1 exited (code 1, ...)
//
// Everything goes to stderr through one shared sink, so lines from several
// threads never interleave, and each line is flushed as it is written: a
// process that is SIGKILLed (a machine-down emulation, a kill point) keeps
// every line it logged. `bulwark up` sends stderr to controller.log and
// machines/ID/agent.log (cluster/layout.h), so the files stay where they were.
// BULWARK_LOG_LEVEL (debug, info, warn, error; default info) sets the level.
//
// spdlog stays behind this header: the rest of the code needs neither its
// nor fmt's headers, and nothing that links libtorch links it.
#pragma once

#include <memory>
#include <string>

namespace spdlog {
class logger;
}

namespace bulwark {

class Logger {
 public:
  // The logger named `name`, created on first use; the same name always
  // gives the same logger.
  explicit Logger(const std::string& name);

  void Debug(const std::string& line) const;
  void Info(const std::string& line) const;
  void Warn(const std::string& line) const;
  void Error(const std::string& line) const;
  const std::string& name() const;

 private:
  std::shared_ptr<spdlog::logger> impl_;
};

}  // namespace bulwark
