// IpcHandle's text and byte forms (no CUDA needed).
#include <utility>

#include "gpu/shared_device_memory.h"

namespace kvtier::gpu {

std::string IpcHandle::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(kBytes * 2);
  for (uint8_t b : bytes) {
    hex.push_back(kDigits[b >> 4]);
    hex.push_back(kDigits[b & 15]);
  }
  return hex;
}

Result<IpcHandle> IpcHandle::FromHex(std::string_view hex) {
  if (hex.size() != kBytes * 2) {
    return InvalidArgumentError("CUDA IPC handle: expected " + std::to_string(kBytes * 2) +
                                " hex digits, got " + std::to_string(hex.size()));
  }
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  IpcHandle handle;
  for (size_t i = 0; i < kBytes; ++i) {
    const int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return InvalidArgumentError("CUDA IPC handle: not a hex digit at position " +
                                  std::to_string(hi < 0 ? 2 * i : 2 * i + 1));
    }
    handle.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return handle;
}

Result<IpcHandle> IpcHandle::FromBytes(std::string_view raw) {
  if (raw.size() != kBytes) {
    return InvalidArgumentError("CUDA IPC handle: expected " + std::to_string(kBytes) +
                                " bytes, got " + std::to_string(raw.size()));
  }
  IpcHandle handle;
  for (size_t i = 0; i < kBytes; ++i) handle.bytes[i] = static_cast<uint8_t>(raw[i]);
  return handle;
}

SharedDeviceMemory& SharedDeviceMemory::operator=(SharedDeviceMemory&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    device_ = std::exchange(other.device_, -1);
    handle_ = other.handle_;
    owner_ = std::exchange(other.owner_, false);
  }
  return *this;
}

}  // namespace kvtier::gpu
