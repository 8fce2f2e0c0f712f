#include "common/status.h"

#include <cstdio>
#include <cstdlib>

namespace kvtier {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kCancelled: return "CANCELLED";
    case StatusCode::kUnknown: return "UNKNOWN";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied: return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kUnauthenticated: return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

RetryAdvice RetryAdviceFor(StatusCode code) {
  switch (code) {
    case StatusCode::kUnavailable:
    case StatusCode::kResourceExhausted:
    case StatusCode::kDeadlineExceeded: return RetryAdvice::kWithBackoff;
    case StatusCode::kAborted: return RetryAdvice::kAtHigherLevel;
    default: return RetryAdvice::kNever;
  }
}

Status::Status(StatusCode code, std::string message)
    : code_(code), message_(code == StatusCode::kOk ? std::string() : std::move(message)) {}

Status Status::Constant(StatusCode code, const std::string* message) {
  assert(code != StatusCode::kOk && message != nullptr);
  Status status;
  status.code_ = code;
  status.constant_ = message;
  return status;
}

const std::string* MessageConstant(std::string_view text) { return new std::string(text); }

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += this->message();
  return Status(code_, std::move(message));
}

std::string Status::ToString() const {
  std::string out(StatusCodeName(code_));
  if (!ok()) {
    out += ": ";
    out += message();
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const Status& status) { return os << status.ToString(); }

namespace internal {

void DieOfValueOnError(const Status& status) {
  // stderr unbuffered, then abort: a core and the cause, never a read of an empty value.
  std::fprintf(stderr, "Result::value() on an error: %s\n", status.ToString().c_str());
  std::abort();
}

}  // namespace internal

Status CancelledError(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
Status DeadlineExceededError(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
Status AlreadyExistsError(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
Status PermissionDeniedError(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
Status ResourceExhaustedError(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
Status FailedPreconditionError(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
Status AbortedError(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
Status UnimplementedError(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
Status UnauthenticatedError(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }

}  // namespace kvtier
