#include "services/rpc/status_mapping.h"

#include <string>
#include <string_view>

namespace kvtier::rpc {
namespace {

constexpr std::string_view kPrefix = "kvtier[";

kj::Exception::Type KjTypeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kResourceExhausted: return kj::Exception::Type::OVERLOADED;
    case StatusCode::kUnavailable: return kj::Exception::Type::DISCONNECTED;
    case StatusCode::kUnimplemented: return kj::Exception::Type::UNIMPLEMENTED;
    default: return kj::Exception::Type::FAILED;
  }
}

StatusCode CodeForKjType(kj::Exception::Type type) {
  switch (type) {
    case kj::Exception::Type::OVERLOADED: return StatusCode::kResourceExhausted;
    case kj::Exception::Type::DISCONNECTED: return StatusCode::kUnavailable;
    case kj::Exception::Type::UNIMPLEMENTED: return StatusCode::kUnimplemented;
    default: return StatusCode::kInternal;
  }
}

bool CodeFromName(std::string_view name, StatusCode& code) {
  for (int c = 0; c <= static_cast<int>(StatusCode::kUnauthenticated); ++c) {
    if (StatusCodeName(static_cast<StatusCode>(c)) == name) {
      code = static_cast<StatusCode>(c);
      return true;
    }
  }
  return false;
}

}  // namespace

kj::Exception StatusToException(const Status& status) {
  const std::string description =
      std::string(kPrefix) + std::string(StatusCodeName(status.code())) + "] " + status.message();
  return kj::Exception(KjTypeFor(status.code()), __FILE__, __LINE__,
                       kj::heapString(description.c_str()));
}

void ThrowStatus(const Status& status) { kj::throwFatalException(StatusToException(status)); }

void ThrowIfError(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

Status ExceptionToStatus(const kj::Exception& exception) {
  const std::string_view description(exception.getDescription().cStr());
  // Remote exceptions arrive as "remote exception: kvtier[CODE] message".
  const size_t at = description.find(kPrefix);
  if (at != std::string_view::npos) {
    const size_t close = description.find(']', at);
    StatusCode code;
    if (close != std::string_view::npos &&
        CodeFromName(description.substr(at + kPrefix.size(), close - at - kPrefix.size()), code)) {
      std::string_view message = description.substr(close + 1);
      if (message.starts_with(' ')) message.remove_prefix(1);
      return Status(code, std::string(message));
    }
  }
  return Status(CodeForKjType(exception.getType()), std::string(description));
}

}  // namespace kvtier::rpc
