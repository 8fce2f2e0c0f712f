// Test helpers: blocks with recognisable payloads for the tier tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "storage/block_header.h"

namespace kvtier::storage::testing {

inline constexpr char kFormat[] = "test-model|L2/H2/D64/T16/fp16/W0/S0|none";
// The salt scope MakeBlock gives a block unless told otherwise.
inline constexpr uint64_t kScope = 7;

struct TestBlock {
  BlockHeader header;
  std::vector<uint8_t> payload;

  BlockRef ref() const { return BlockRef{header.key, header.format_tag, header.salt_scope}; }
};

// Block `id` of `bytes` bytes with a pseudo-random payload drawn from a generator
// seeded by the id: no block's bytes appear inside another's.
inline TestBlock MakeBlock(uint64_t id, size_t bytes, uint8_t priority = kDefaultPriority,
                           uint64_t salt_scope = kScope, const std::string& format = kFormat) {
  TestBlock block;
  block.payload.resize(bytes);
  uint64_t state = id * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i < bytes; ++i) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;  // xorshift64
    block.payload[i] = static_cast<uint8_t>(state >> 32);
  }
  block.header.key = BlockKey{0x1234, id};
  block.header.parent = BlockKey{0x1234, id - 1};
  block.header.format_tag = format;
  block.header.salt_scope = salt_scope;
  block.header.payload_bytes = bytes;
  block.header.checksum = PayloadChecksum(block.payload);
  block.header.priority = priority;
  return block;
}

// Flips one byte inside the first copy of `payload` found in a disk tier's payload segment
// under `dir` (a corruption that only the payload checksum can catch). False when none is
// found. REQUIRES: payload of at least 164 bytes.
inline bool CorruptPayload(const std::string& dir, const std::vector<uint8_t>& payload) {
  for (const auto& file : std::filesystem::recursive_directory_iterator(dir)) {
    if (file.path().extension() != ".seg") continue;
    std::fstream stream(file.path(), std::ios::in | std::ios::out | std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(stream)), {});
    const size_t at = bytes.find(std::string(payload.begin(), payload.begin() + 64));
    if (at == std::string::npos) continue;
    const auto offset = static_cast<std::streamoff>(at + 100);
    stream.seekp(offset);
    stream.put(static_cast<char>(bytes[offset] ^ 0x5A));
    return stream.good();
  }
  return false;
}

}  // namespace kvtier::storage::testing
