// The cluster's fence timeout (docs/control-plane.md, "Fencing"), in
// DIR/fence-timeout as seconds, written by `bulwark up`. The agents read it
// (each stops its ranks after that long cut off from the controller) and so
// does the controller (its heartbeat timeout, the lease, outlasts it), at
// every start: a restarted controller keeps the lease its agents keep.
#pragma once

#include <chrono>
#include <cstdlib>
#include <string>

#include "cluster/layout.h"
#include "common/files.h"
#include "common/status.h"

namespace bulwark::cluster {

// How much longer the controller waits than the agents: a report's way
// there, the agent's loop period and the time to stop its ranks.
inline constexpr std::chrono::milliseconds kFenceMargin{1000};

// 0 when the file is absent (no fencing: a cluster sharing one host's
// network cannot be partitioned); InvalidArgument when it holds no number.
inline Result<std::chrono::milliseconds> ReadFenceTimeout(const Layout& layout) {
  Result<std::string> text = ReadFile(layout.fence_timeout());
  if (!text.ok()) return std::chrono::milliseconds(0);
  char* end = nullptr;
  const double s = std::strtod(text->c_str(), &end);
  while (end != nullptr && (*end == '\n' || *end == ' ')) ++end;
  if (end == text->c_str() || (end != nullptr && *end != '\0') || !(s >= 0)) {
    return Status::InvalidArgument(layout.fence_timeout() + " holds '" + *text +
                                   "', not seconds; write e.g. 3 there, or 0 for no fencing");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

}  // namespace bulwark::cluster
