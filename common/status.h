// Status and Result<T>: how every kvtier library reports failure.
//
// A Status is a canonical code (the gRPC/abseil set) plus a message that names what was
// wrong. The code is for machines: it tells the caller whether a retry can help (see
// RetryAdviceFor). The message is for people: it names the field, value or resource at
// fault and never needs parsing.
//
// Result<T> holds either a T or a non-OK Status.
//
// Thread safety: values; a const Status or Result may be read from any thread.
// Ownership: plain value types, cheap to move. An OK Status allocates nothing, nor does a
// Status::Constant, made or copied.
//
// REQUIRES: Result<T>::operator* and operator-> only on an ok() Result (checked by
//   assert only: they are the hot path's). value() on an error is always checked: it
//   prints the Status and aborts, in every build type, as abseil's StatusOr::value().
// REQUIRES: a Result is never constructed from an OK Status.
#pragma once

#include <cassert>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace kvtier {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// What a caller should do about a failed operation, by code (abseil's guidance):
//  kNever: the same call fails the same way; fix the input or the state first.
//  kWithBackoff: transient (kUnavailable, kResourceExhausted, kDeadlineExceeded):
//    retry the same call after a delay.
//  kAtHigherLevel: kAborted: a concurrent change won; redo the whole read-modify-write.
enum class RetryAdvice { kNever, kWithBackoff, kAtHigherLevel };

[[nodiscard]] RetryAdvice RetryAdviceFor(StatusCode code);
[[nodiscard]] std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }
  // A Status whose message is `*message`, a string made once that outlives the Status and
  // every copy of it (MessageConstant): making, copying and moving it allocate nothing.
  // For an outcome that a hot path meets by the thousand, such as a tier's miss, whose
  // caller knows which block it asked about.
  // REQUIRES: code != kOk; message is not null and outlives the Status and its copies.
  static Status Constant(StatusCode code, const std::string* message);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return constant_ != nullptr ? *constant_ : message_; }
  RetryAdvice retry_advice() const { return RetryAdviceFor(code_); }

  // Returns a Status with the same code and "context: message".
  Status WithContext(std::string_view context) const;

  // "OK" or "INVALID_ARGUMENT: metrics.port: 70000 is out of range [0, 65535]".
  std::string ToString() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message() == b.message();
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;                    // empty when constant_ is set
  const std::string* constant_ = nullptr;  // Constant's message
};

// `text`, made once and never destroyed (no exit-time destructor can run under a Status
// still held by a thread), for Status::Constant:
//   static const std::string* const kMiss = MessageConstant("... is not in the host tier");
[[nodiscard]] const std::string* MessageConstant(std::string_view text);

std::ostream& operator<<(std::ostream& os, const Status& status);

// Constructors named after their codes, for readable call sites.
Status CancelledError(std::string message);
Status InvalidArgumentError(std::string message);
Status DeadlineExceededError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status PermissionDeniedError(std::string message);
Status ResourceExhaustedError(std::string message);
Status FailedPreconditionError(std::string message);
Status AbortedError(std::string message);
Status OutOfRangeError(std::string message);
Status UnimplementedError(std::string message);
Status InternalError(std::string message);
Status UnavailableError(std::string message);
Status DataLossError(std::string message);
Status UnauthenticatedError(std::string message);

namespace internal {
// Prints "Result::value() on an error: <status>" to stderr and aborts.
[[noreturn]] void DieOfValueOnError(const Status& status);
}  // namespace internal

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status)                          // NOLINT: implicit by design
      : status_(status.ok() ? InternalError("Result constructed from an OK Status")
                            : std::move(status)) {
    assert(!status_.ok());
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & {
    CheckOk();
    return *value_;
  }
  const T& value() const& {
    CheckOk();
    return *value_;
  }
  T&& value() && {
    CheckOk();
    return std::move(*value_);
  }
  T& operator*() & {
    assert(ok());
    return *value_;
  }
  const T& operator*() const& {
    assert(ok());
    return *value_;
  }
  T&& operator*() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() {
    assert(ok());
    return &*value_;
  }
  const T* operator->() const {
    assert(ok());
    return &*value_;
  }

  template <typename U>
  T value_or(U&& fallback) const& {
    return ok() ? *value_ : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  void CheckOk() const {
    if (!ok()) [[unlikely]]
      internal::DieOfValueOnError(status_);
  }

  Status status_;  // OK exactly when value_ holds a value
  std::optional<T> value_;
};

}  // namespace kvtier

#define KVTIER_STATUS_CONCAT_INNER(a, b) a##b
#define KVTIER_STATUS_CONCAT(a, b) KVTIER_STATUS_CONCAT_INNER(a, b)

// Returns from the current function when `expr` (a Status) is not OK.
#define KVTIER_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::kvtier::Status kvtier_status_ = (expr);        \
    if (!kvtier_status_.ok()) return kvtier_status_; \
  } while (false)

// `lhs = value of expr` (a Result<T>), or returns its Status from the current function.
#define KVTIER_ASSIGN_OR_RETURN(lhs, expr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL(KVTIER_STATUS_CONCAT(kvtier_result_, __LINE__), lhs, expr)
// `result` names a variable and `lhs` may declare one (`std::string s`): neither can be
// parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define KVTIER_ASSIGN_OR_RETURN_IMPL(result, lhs, expr) \
  auto result = (expr);                                 \
  if (!result.ok()) return result.status();             \
  lhs = std::move(result).value()
// NOLINTEND(bugprone-macro-parentheses)
