// Fuzz target: DecodeHeader over bytes from outside (a peer's keyed put headers, a header
// read back from disk). Beyond not crashing or reading past the input, a header it accepts
// must be exactly what the bytes say: it consumed its own encoded size and no more than it
// was given, and encoding it gives back the bytes it was decoded from (the flags byte but its
// one defined bit, which decoding ignores), which decode to the same header again.
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "storage/block_header.h"
#include "tests/testing/fuzz_check.h"

namespace {

using kvtier::storage::BlockHeader;
using kvtier::testing::FuzzCheck;

constexpr size_t kFlagsOffset = 73;  // u8 flags, after the u8 priority (block_header.h)

bool SameHeader(const BlockHeader& a, const BlockHeader& b) {
  return a.key == b.key && a.parent == b.parent && a.first_in_chain == b.first_in_chain &&
         a.format_tag == b.format_tag && a.salt_scope == b.salt_scope && a.checksum == b.checksum &&
         a.payload_bytes == b.payload_bytes && a.priority == b.priority &&
         a.retention_left_ms == b.retention_left_ms;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t consumed = 0;
  const kvtier::Result<BlockHeader> header = kvtier::storage::DecodeHeader({data, size}, consumed);
  if (!header.ok()) return 0;  // refused: the behaviour wanted for malformed bytes
  FuzzCheck(consumed <= size, "consumed no more than the input");
  FuzzCheck(consumed == kvtier::storage::EncodedHeaderBytes(*header), "consumed its encoded size");
  FuzzCheck(header->priority <= 100, "priority within 0-100");

  std::string encoded;
  kvtier::storage::EncodeHeader(*header, encoded);
  FuzzCheck(encoded.size() == consumed, "encodes to the size it was decoded from");
  std::string original(reinterpret_cast<const char*>(data), consumed);
  original[kFlagsOffset] = static_cast<char>(original[kFlagsOffset] & 1);
  FuzzCheck(std::memcmp(encoded.data(), original.data(), consumed) == 0,
            "encodes back to its bytes");

  size_t again = 0;
  const kvtier::Result<BlockHeader> decoded = kvtier::storage::DecodeHeader(
      {reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size()}, again);
  FuzzCheck(decoded.ok() && again == consumed && SameHeader(*decoded, *header),
            "its encoding decodes to it");
  return 0;
}
