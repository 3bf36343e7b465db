// Status and StatusOr: errors that cross a module boundary are values, not exceptions.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace tediserve {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input from the caller (flag, request field, config value)
  kNotFound,         // a file or tensor that should exist does not
  kDataLoss,         // a file exists but is truncated or corrupt
  kFailedPrecondition,
  kOutOfRange,       // e.g. a prompt longer than the model's context
  kUnimplemented,
  kInternal,
  kAlreadyExists,      // e.g. a request or instance id that is already live
  kUnavailable,        // a worker or instance that cannot take work now; retrying may help
  kCancelled,          // the client (or an operator) cancelled the operation
  kDeadlineExceeded,   // the operation's deadline passed before it finished
  kResourceExhausted,  // a queue, memory or token budget is full
  kIoError,            // reading or writing a file failed for a reason other than its content
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

  // Returns a copy with "context: " put in front of the message.
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }

const char* StatusCodeName(StatusCode code);

// The one mapping of codes to process exit codes and HTTP statuses (docs/design.md
// section 6, Errors).
// Exit codes: 0 ok; 2 the input was bad (a flag, a config or model file, a trace: fix it and
// rerun); 1 the run failed for another reason (an output that cannot be written, an internal
// error, something unavailable).
int ExitCode(StatusCode code);
inline int ExitCode(const Status& s) { return ExitCode(s.code()); }
// HTTP: 400 invalid argument / out of range, 404 not found, 409 already exists, 412 failed
// precondition, 429 resource exhausted, 499 cancelled (client closed request), 501
// unimplemented, 503 unavailable, 504 deadline exceeded, 500 everything else (data loss, I/O,
// internal).
int HttpStatus(StatusCode code);

// Either a value or a non-ok Status.
template <typename T>
class StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace tediserve

#define TEDI_CONCAT_INNER(a, b) a##b
#define TEDI_CONCAT(a, b) TEDI_CONCAT_INNER(a, b)

// Returns the status from the enclosing function if it is not ok.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::tediserve::Status _tedi_status = (expr);         \
    if (!_tedi_status.ok()) return _tedi_status;       \
  } while (0)

#define TEDI_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

// ASSIGN_OR_RETURN(auto x, MakeX()); declares x or returns the error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  TEDI_ASSIGN_OR_RETURN_IMPL(TEDI_CONCAT(_tedi_or_, __LINE__), lhs, expr)
