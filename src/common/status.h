// Status and Result<T>: errors as values.
//
// A Status is OK or carries one code from a small closed set plus a message
// that names the subject and, where there is one, the next step for the user
// ("checkpoint runs/a/step-00000040/rank-0.bin: checksum mismatch; it is
// skipped"). Libraries return these; only main() turns them into exit codes.
//
// Both are [[nodiscard]] and the build has -Werror=unused-result: a caller
// handles a result, or drops it on purpose with IgnoreError() and a comment
// saying why that is safe.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace bulwark {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,    // the caller's input is wrong: flags, config, spec
    kNotFound,           // a named file, machine or object does not exist
    kCorrupt,            // stored data failed its checksum or format check
    kIOError,            // the OS refused a read, write, rename or sync
    kFailedPrecondition, // valid input that does not fit the current state
    kUnavailable,        // a peer is gone or timed out; may succeed on retry
    kInternal,           // a bug in bulwark
    kPermissionDenied,   // the caller could not prove it may do this (no or a wrong token)
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
  static Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
  static Status Corrupt(std::string m) { return Status(Code::kCorrupt, std::move(m)); }
  static Status IOError(std::string m) { return Status(Code::kIOError, std::move(m)); }
  static Status FailedPrecondition(std::string m) { return Status(Code::kFailedPrecondition, std::move(m)); }
  static Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
  static Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }
  static Status PermissionDenied(std::string m) { return Status(Code::kPermissionDenied, std::move(m)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt: <message>", or "OK".
  std::string ToString() const;
  // Prefixes the message with context, keeping the code: "loading data: ...".
  Status Annotate(const std::string& context) const;
  // Drops the status on purpose. Every call says, in a comment beside it,
  // why the error cannot matter there (a best-effort cleanup, a report
  // that is logged elsewhere).
  void IgnoreError() const {}

 private:
  Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

const char* CodeName(Status::Code code);

// A value or the Status that explains why there is none; never both.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // As Status::IgnoreError: dropped on purpose, with a comment saying why.
  void IgnoreError() const {}
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T& operator*() { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace bulwark

#define BULWARK_RETURN_IF_ERROR(expr)           \
  do {                                          \
    ::bulwark::Status _st = (expr);             \
    if (!_st.ok()) return _st;                  \
  } while (0)
