// The one place where kvtier Status and KJ exceptions meet.
//
// Libraries return Status; Cap'n Proto servers must throw. A server converts with
// ThrowStatus(); the exception's description is "kvtier[CODE] message" with CODE the
// canonical name (INVALID_ARGUMENT, ...), and its KJ type carries the retry meaning that
// KJ itself understands (OVERLOADED for RESOURCE_EXHAUSTED, DISCONNECTED for UNAVAILABLE,
// UNIMPLEMENTED). The client turns any exception back into a Status with
// ExceptionToStatus(): a kvtier code when the server sent one, otherwise one derived from
// the KJ type (a dropped connection is UNAVAILABLE, an unknown method UNIMPLEMENTED).
//
// Thread safety: pure functions.
#pragma once

#include <kj/exception.h>

#include "common/status.h"

namespace kvtier::rpc {

[[nodiscard]] kj::Exception StatusToException(const Status& status);

// REQUIRES: !status.ok()
[[noreturn]] void ThrowStatus(const Status& status);

// Throws unless `status` is OK; for the tail of a server method.
void ThrowIfError(const Status& status);

// The value, or throws the error.
template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) ThrowStatus(result.status());
  return std::move(*result);
}

[[nodiscard]] Status ExceptionToStatus(const kj::Exception& exception);

}  // namespace kvtier::rpc
