#include "common/status.h"

namespace bulwark {

const char* CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk: return "OK";
    case Status::Code::kInvalidArgument: return "invalid argument";
    case Status::Code::kNotFound: return "not found";
    case Status::Code::kCorrupt: return "corrupt";
    case Status::Code::kIOError: return "I/O error";
    case Status::Code::kFailedPrecondition: return "failed precondition";
    case Status::Code::kUnavailable: return "unavailable";
    case Status::Code::kInternal: return "internal error";
    case Status::Code::kPermissionDenied: return "permission denied";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

Status Status::Annotate(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace bulwark
