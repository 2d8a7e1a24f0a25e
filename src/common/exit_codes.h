// Exit codes of bulwark-train, part of its contract with whatever supervises
// it: an agent reads them to tell a bad job spec from a lost peer.
#pragma once

#include "common/status.h"

namespace bulwark {

constexpr int kExitOk = 0;
constexpr int kExitInternal = 1;   // a bug, or an error outside the classes below
constexpr int kExitUsage = 2;      // bad flags, config, data or checkpoint shape: fix the input
constexpr int kExitPeerLost = 3;   // a collective failed: a peer died, hung or was cut off
constexpr int kExitIO = 4;         // the OS refused a read or write (disk full, permissions)

inline int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case Status::Code::kOk: return kExitOk;
    case Status::Code::kInvalidArgument:
    case Status::Code::kNotFound:
    case Status::Code::kFailedPrecondition:
    case Status::Code::kPermissionDenied:
    case Status::Code::kCorrupt: return kExitUsage;
    case Status::Code::kUnavailable: return kExitPeerLost;
    case Status::Code::kIOError: return kExitIO;
    case Status::Code::kInternal: return kExitInternal;
  }
  return kExitInternal;
}

}  // namespace bulwark
