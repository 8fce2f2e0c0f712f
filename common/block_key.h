// BlockKey: the identity of one KV-cache block, shared by every node and tenant.
//
// A block's key is a chained hash: it commits to the whole prefix before it, so two
// prompts share their first k keys exactly when they share their first k blocks of
// tokens (and salt and extra keys). Keys are 128 bits: the first 16 bytes of a SHA-256
// (OpenSSL) over a canonical, length-prefixed encoding (tests/vectors/
// block_keys.py is an independent implementation of it):
//
//   root(salt)   = SHA-256("kvtier.root.v1" | u32 len(salt) | salt)[0:16]
//   key(block i) = SHA-256("kvtier.block.v1" | u64 parent.hi | u64 parent.lo |
//                          u64 lora_id | u32 len(model_tag) | model_tag |
//                          u32 n_extra | (u32 len | bytes)* |
//                          u32 n_tokens | u32 token*)[0:16]
//
// with parent = root(salt) for the first block, all integers little-endian, and the top
// bit of every hashed key cleared (it marks opaque keys, below). A key's 16 bytes are
// read big-endian into (hi, lo), so ToHex() is the digest's hex prefix. The
// salt enters only through the root, so chains under different salts never meet.
// Why SHA-256: tenants share the index; with a fast non-cryptographic hash one tenant
// could forge a block whose key equals another tenant's prefix and poison it (vLLM moved
// to SHA-256 for the same reason). 128 bits keeps second preimages at 2^128 work while
// halving index memory next to the full digest.
//
// Opaque keys: engines that already hash blocks (the Mooncake traces carry one id per
// 512-token block) pass those ids as they are. An opaque key is
//   hi = (1 << 63) | first 8 bytes of SHA-256("kvtier.opaque.v1" | u32 len(ns) | ns |
//                                           u32 len(salt) | salt)
//   lo = the engine's id,
// so ids live in a namespace of their own per (engine namespace, salt): they cannot meet
// hashed keys or other namespaces.
//
// Thread safety: values and pure functions.
//
// REQUIRES: tokens_per_block > 0 for ComputeBlockKeys.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kvtier {

struct BlockKey {
  uint64_t hi = 0;
  uint64_t lo = 0;

  bool IsOpaque() const { return (hi >> 63) != 0; }
  // 32 lowercase hex digits, hi first.
  std::string ToHex() const;
  static Result<BlockKey> FromHex(std::string_view hex);

  friend auto operator<=>(const BlockKey&, const BlockKey&) = default;
};

// Keys that are not tokens but change what a block's KV values are.
struct BlockExtraKeys {
  uint64_t lora_id = 0;            // 0: the base model
  std::string model_tag;           // model and KV format, e.g. "llama3-8b/bf16"
  std::vector<std::string> extra;  // e.g. multimodal content hashes
};

// The parent key of a tenant's first block.
[[nodiscard]] BlockKey RootKey(std::string_view salt);

// The key of one block given its parent's key.
[[nodiscard]] BlockKey ChainBlockKey(const BlockKey& parent, std::span<const uint32_t> tokens,
                                     const BlockExtraKeys& extra);

// Keys of every full block of `tokens`; a partial last block has no key yet.
[[nodiscard]] std::vector<BlockKey> ComputeBlockKeys(std::string_view salt,
                                                     std::span<const uint32_t> tokens,
                                                     uint32_t tokens_per_block,
                                                     const BlockExtraKeys& extra = {});

// Maps engine-provided block ids into kvtier's key space (see the header comment).
class OpaqueKeyNamespace {
 public:
  OpaqueKeyNamespace(std::string_view engine_namespace, std::string_view salt);
  BlockKey Key(uint64_t engine_id) const { return BlockKey{tag_, engine_id}; }

 private:
  uint64_t tag_;
};

// A tenant's key space, applied by the servers. Clients compute keys under the empty salt
// (they need not know it); each server maps every key a tenant session sends through the
// session's KeySalt before the key meets a pool, tier, index, event or stream:
//
//   secret       = SHA-256("kvtier.salt.v1" | u32 len(salt) | salt)
//   salted(key)  = SHA-256("kvtier.salted.v1" | secret | u64 key.hi | u64 key.lo)[0:16]
//
// with the top bit of salted(key) that of key (an opaque key stays opaque). So equal
// prompts of two tenants never share an identity anywhere past the RPC boundary, whatever
// keys the clients send. The empty salt (auth off, node sessions, whose keys are already
// salted) is the identity. Tenants configured with the same salt share a key space.
class KeySalt {
 public:
  KeySalt() = default;  // the identity
  explicit KeySalt(std::string_view salt);

  bool identity() const { return identity_; }
  [[nodiscard]] BlockKey Apply(const BlockKey& key) const;
  [[nodiscard]] std::vector<BlockKey> Apply(std::vector<BlockKey> keys) const;  // salted in place
  void ApplyInPlace(std::span<BlockKey> keys) const;
  // The parent of a tenant's first block: Apply(RootKey("")).
  [[nodiscard]] BlockKey Root() const;

 private:
  std::array<uint8_t, 32> secret_{};
  bool identity_ = true;
};

// A tenant's salt scope as it travels in events and block headers: the first 8 bytes of
// SHA-256("kvtier.scope.v1" | u32 len(salt) | salt). Never the salt itself.
[[nodiscard]] uint64_t SaltScope(std::string_view salt);

struct BlockKeyHash {
  size_t operator()(const BlockKey& key) const {
    // The bits are already uniformly distributed (SHA-256), except opaque lo parts,
    // which we mix with a multiplicative step.
    return static_cast<size_t>(key.hi ^ (key.lo * 0x9E3779B97F4A7C15ULL));
  }
};

}  // namespace kvtier
