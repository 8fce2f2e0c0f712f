#include "storage/block_header.h"

#include <cstring>

#include "common/retention_limit.h"
#include "storage/fast_xxh3.h"

namespace kvtier::storage {
namespace {

constexpr uint32_t kMagic = 0x3142564B;  // "KVB1" read little-endian
constexpr size_t kFixedBytes = kMaxEncodedHeaderBytes - kMaxFormatTagBytes;  // 76

template <typename T>
void Put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and aarch64 Linux: little-endian
  out.append(bytes, sizeof(T));
}

template <typename T>
T Get(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

}  // namespace

uint64_t PayloadChecksum(std::span<const uint8_t> payload) {
  return XXH3_64bits(payload.data(), payload.size());
}

Status ValidateFormatTag(std::string_view format_tag) {
  if (format_tag.empty()) return InvalidArgumentError("block format tag is empty");
  if (format_tag.size() > kMaxFormatTagBytes) {
    return InvalidArgumentError("block format tag is " + std::to_string(format_tag.size()) +
                                " bytes; at most " + std::to_string(kMaxFormatTagBytes) +
                                " allowed");
  }
  return Status::Ok();
}

void SaltHeader(const KeySalt& salt, BlockHeader& header) {
  header.key = salt.Apply(header.key);
  header.parent = salt.Apply(header.parent);
}

Status ValidateHeader(const BlockHeader& header, uint64_t max_payload_bytes) {
  KVTIER_RETURN_IF_ERROR(ValidateFormatTag(header.format_tag));
  if (header.priority > 100) {
    return InvalidArgumentError("block priority " + std::to_string(header.priority) +
                                " is outside 0-100");
  }
  KVTIER_RETURN_IF_ERROR(RetentionFromMs(header.retention_left_ms, "block retention").status());
  if (header.payload_bytes == 0) return InvalidArgumentError("block payload is empty");
  if (header.payload_bytes > max_payload_bytes) {
    return InvalidArgumentError("block payload of " + std::to_string(header.payload_bytes) +
                                " bytes exceeds the limit of " + std::to_string(max_payload_bytes));
  }
  return Status::Ok();
}

Status ValidateBlockSize(const BlockHeader& header, std::span<const uint8_t> payload,
                         uint64_t max_payload_bytes) {
  KVTIER_RETURN_IF_ERROR(ValidateHeader(header, max_payload_bytes));
  if (payload.size() != header.payload_bytes) {
    return InvalidArgumentError("block payload is " + std::to_string(payload.size()) +
                                " bytes; its header says " + std::to_string(header.payload_bytes) +
                                " (truncated or oversized)");
  }
  return Status::Ok();
}

Status ValidateBlock(const BlockHeader& header, std::span<const uint8_t> payload,
                     uint64_t max_payload_bytes) {
  KVTIER_RETURN_IF_ERROR(ValidateBlockSize(header, payload, max_payload_bytes));
  if (PayloadChecksum(payload) != header.checksum) return ChecksumMismatchError(header);
  return Status::Ok();
}

Status ChecksumMismatchError(const BlockHeader& header) {
  return InvalidArgumentError("block payload does not match its checksum (block " +
                              header.key.ToHex() + ")");
}

size_t EncodedHeaderBytes(const BlockHeader& header) {
  return kFixedBytes + header.format_tag.size();
}

void EncodeHeader(const BlockHeader& header, std::string& out) {
  out.reserve(out.size() + EncodedHeaderBytes(header));
  Put<uint32_t>(out, kMagic);
  Put<uint32_t>(out, static_cast<uint32_t>(EncodedHeaderBytes(header)));
  Put<uint64_t>(out, header.key.hi);
  Put<uint64_t>(out, header.key.lo);
  Put<uint64_t>(out, header.parent.hi);
  Put<uint64_t>(out, header.parent.lo);
  Put<uint64_t>(out, header.salt_scope);
  Put<uint64_t>(out, header.checksum);
  Put<uint64_t>(out, header.payload_bytes);
  Put<uint64_t>(out, header.retention_left_ms);
  Put<uint8_t>(out, header.priority);
  Put<uint8_t>(out, header.first_in_chain ? 1 : 0);
  Put<uint16_t>(out, static_cast<uint16_t>(header.format_tag.size()));
  out.append(header.format_tag);
}

Result<BlockHeader> DecodeHeader(std::span<const uint8_t> bytes, size_t& consumed) {
  if (bytes.size() < kFixedBytes) {
    return DataLossError("block header truncated: " + std::to_string(bytes.size()) +
                         " bytes, at least " + std::to_string(kFixedBytes) + " needed");
  }
  const uint8_t* p = bytes.data();
  if (Get<uint32_t>(p) != kMagic) return DataLossError("block header has a bad magic number");
  const uint32_t encoded = Get<uint32_t>(p + 4);
  const uint16_t tag_bytes = Get<uint16_t>(p + 74);
  if (encoded != kFixedBytes + tag_bytes || encoded > bytes.size()) {
    return DataLossError("block header length " + std::to_string(encoded) +
                         " is inconsistent (tag " + std::to_string(tag_bytes) + " bytes, " +
                         std::to_string(bytes.size()) + " available)");
  }
  BlockHeader header;
  header.key = BlockKey{Get<uint64_t>(p + 8), Get<uint64_t>(p + 16)};
  header.parent = BlockKey{Get<uint64_t>(p + 24), Get<uint64_t>(p + 32)};
  header.salt_scope = Get<uint64_t>(p + 40);
  header.checksum = Get<uint64_t>(p + 48);
  header.payload_bytes = Get<uint64_t>(p + 56);
  header.retention_left_ms = Get<uint64_t>(p + 64);
  header.priority = p[72];
  header.first_in_chain = (p[73] & 1) != 0;
  if (header.priority > 100) {
    return DataLossError("block header priority " + std::to_string(header.priority) +
                         " is outside 0-100");
  }
  KVTIER_ASSIGN_OR_RETURN(
      header.format_tag,
      FormatTag::Intern({reinterpret_cast<const char*>(p + kFixedBytes), tag_bytes}));
  consumed = encoded;
  return header;
}

}  // namespace kvtier::storage
