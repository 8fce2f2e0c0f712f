// BlockHeader: what travels in front of every block payload a tier keeps.
//
// A stored block is identified by (format tag, key) and owned by one salt scope. The
// format tag names everything that decides how the payload's bytes are read: model id,
// KvLayout fingerprint and quantization (e.g. "llama3-8b|L32/H8/D128/T16/bf16/W0/S0|none").
// Tiers index blocks by (format tag, key), so a block is never found for another layout
// or model; a lookup under another salt scope is answered "not found", exactly as if
// the block did not exist, so tenants learn nothing of each other's blocks.
//
// Encoded form, all integers little-endian (76 fixed bytes, then the tag):
//   u32 magic "KVB1" | u32 encoded header bytes | u64 key.hi | u64 key.lo |
//   u64 parent.hi | u64 parent.lo | u64 salt_scope | u64 checksum | u64 payload bytes | u64
//   retention left ms (0: none) | u8 priority | u8 flags (bit 0: first in chain) | u16 len(tag) |
//   tag bytes
// The checksum (XXH3-64, xxHash) covers the payload; a reader recomputes it before it
// hands a payload out, so a corrupt block is reported as data loss, never returned.
//
// Thread safety: values and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/block_key.h"
#include "common/block_vocabulary.h"
#include "common/status.h"
#include "storage/format_tag.h"

namespace kvtier::storage {

// An encoded header's size: 76 fixed bytes and the tag (see above).
inline constexpr size_t kMaxEncodedHeaderBytes = 76 + kMaxFormatTagBytes;

struct BlockHeader {
  BlockKey key;
  BlockKey parent;              // the previous block's key (the salt root for a first block)
  bool first_in_chain = false;  // the prompt's first block: `parent` is the salt root
  FormatTag format_tag;         // interned: a copy of the header allocates nothing
  uint64_t salt_scope = 0;
  uint64_t checksum = 0;  // PayloadChecksum of the payload
  uint64_t payload_bytes = 0;
  uint8_t priority = kDefaultPriority;
  // How long `priority` still holds when the header is handed over; after it the
  // priority reverts to the default. 0: it never expires. Relative, because nodes share
  // no clock: each tier turns it into a deadline on its own clock when it takes the
  // block and writes back what is left when it passes the block on. After a restart the
  // disk tier counts from recovery (downtime does not consume retention).
  uint64_t retention_left_ms = 0;
};

// Names one stored block for a read: the salt scope must match the stored one.
struct BlockRef {
  BlockKey key;
  std::string_view format_tag;
  uint64_t salt_scope = 0;
};

// XXH3-64 of the payload bytes.
[[nodiscard]] uint64_t PayloadChecksum(std::span<const uint8_t> payload);

// kInvalidArgument when `format_tag` cannot name a block's format: empty or oversized.
[[nodiscard]] Status ValidateFormatTag(std::string_view format_tag);

// kInvalidArgument naming the field when the header cannot describe a stored block:
// empty or oversized format tag, priority above 100, a retention beyond
// kMaxRetentionMs (common/retention.h), zero or oversized payload.
[[nodiscard]] Status ValidateHeader(const BlockHeader& header, uint64_t max_payload_bytes);

// A tenant's header moved into its key space (common/block_key.h KeySalt): its key and
// its parent's, as the servers take every block a tenant session names.
void SaltHeader(const KeySalt& salt, BlockHeader& header);

// ValidateHeader plus: the payload has payload_bytes bytes.
[[nodiscard]] Status ValidateBlockSize(const BlockHeader& header, std::span<const uint8_t> payload,
                                       uint64_t max_payload_bytes);
// ValidateBlockSize plus: the payload matches the checksum.
[[nodiscard]] Status ValidateBlock(const BlockHeader& header, std::span<const uint8_t> payload,
                                   uint64_t max_payload_bytes);
// kInvalidArgument: the block's payload (arrived whole or piece by piece) does not match
// its header's checksum.
[[nodiscard]] Status ChecksumMismatchError(const BlockHeader& header);

[[nodiscard]] size_t EncodedHeaderBytes(const BlockHeader& header);
// Appends the encoded header to `out`.
void EncodeHeader(const BlockHeader& header, std::string& out);
// kDataLoss when `bytes` does not hold one well-formed header (the error names what is
// wrong), kInvalidArgument for a format tag over kMaxFormatTagBytes, kResourceExhausted
// for a new tag past FormatTag::kMaxFormatTags; on success `consumed` is the encoded size.
[[nodiscard]] Result<BlockHeader> DecodeHeader(std::span<const uint8_t> bytes, size_t& consumed);

}  // namespace kvtier::storage
