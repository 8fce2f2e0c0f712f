#include "common/block_key.h"

#include <array>
#include <bit>
#include <cstring>
#include <span>

#include <openssl/evp.h>

namespace kvtier {
namespace {

// OpenSSL's SHA-256, fetched once: EVP_sha256() makes every EVP_DigestInit look the
// algorithm up again, which costs more than hashing a key.
const EVP_MD* Sha256() {
  static const EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);  // kept for the process
  return md;
}

// SHA-256 of the key encoding's little-endian, length-prefixed fields. Fields gather in a
// buffer that reaches OpenSSL in one update (per 4 KiB), and the digest context is the
// thread's, reused: a call per field, or a context allocated per key, cost more than the
// hashing. A writer made while another is alive on the thread gets a context of its own.
class Sha256Writer {
 public:
  Sha256Writer() {
    ThreadContext& thread = Thread();
    if (!thread.busy) {
      thread.busy = true;
      ctx_ = thread.ctx;
    } else {
      ctx_ = EVP_MD_CTX_new();
      owned_ = true;
    }
    EVP_DigestInit_ex2(ctx_, Sha256(), nullptr);
  }
  ~Sha256Writer() {
    if (owned_)
      EVP_MD_CTX_free(ctx_);
    else
      Thread().busy = false;
  }
  Sha256Writer(const Sha256Writer&) = delete;
  Sha256Writer& operator=(const Sha256Writer&) = delete;

  // Starts a new digest.
  void Restart() {
    size_ = 0;
    EVP_DigestInit_ex2(ctx_, Sha256(), nullptr);
  }
  void Bytes(const void* data, size_t size) {
    if (size_ + size > buffer_.size()) {
      Flush();
      if (size > buffer_.size()) {
        EVP_DigestUpdate(ctx_, data, size);
        return;
      }
    }
    std::memcpy(buffer_.data() + size_, data, size);
    size_ += size;
  }
  void U32(uint32_t v) {
    const std::array<uint8_t, 4> b{static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8),
                                   static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 24)};
    Bytes(b.data(), b.size());
  }
  // Each value as U32 does.
  void U32s(std::span<const uint32_t> values) {
    if constexpr (std::endian::native == std::endian::little) {
      Bytes(values.data(), values.size_bytes());
    } else {
      for (uint32_t v : values) U32(v);
    }
  }
  void U64(uint64_t v) {
    U32(static_cast<uint32_t>(v));
    U32(static_cast<uint32_t>(v >> 32));
  }
  void String(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    Bytes(s.data(), s.size());
  }
  void Key(const BlockKey& key) {
    U64(key.hi);
    U64(key.lo);
  }

  // The first 16 bytes of the digest as a key (big-endian halves, so ToHex() is the
  // digest's hex prefix).
  BlockKey Finish() {
    Flush();
    std::array<uint8_t, 32> digest{};
    unsigned int size = 0;
    EVP_DigestFinal_ex(ctx_, digest.data(), &size);
    BlockKey key;
    for (int i = 0; i < 8; ++i) key.hi = (key.hi << 8) | digest[i];
    for (int i = 8; i < 16; ++i) key.lo = (key.lo << 8) | digest[i];
    return key;
  }

 private:
  void Flush() {
    if (size_ > 0) EVP_DigestUpdate(ctx_, buffer_.data(), size_);
    size_ = 0;
  }

  struct ThreadContext {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    bool busy = false;
    ~ThreadContext() { EVP_MD_CTX_free(ctx); }
  };
  static ThreadContext& Thread() {
    thread_local ThreadContext context;
    return context;
  }

  EVP_MD_CTX* ctx_ = nullptr;
  bool owned_ = false;  // a context of its own, not the thread's
  std::array<uint8_t, 4096> buffer_;
  size_t size_ = 0;
};

constexpr uint64_t kOpaqueBit = uint64_t{1} << 63;

}  // namespace

std::string BlockKey::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kDigits[(hi >> (4 * i)) & 0xF];
    out[31 - i] = kDigits[(lo >> (4 * i)) & 0xF];
  }
  return out;
}

Result<BlockKey> BlockKey::FromHex(std::string_view hex) {
  if (hex.size() != 32) {
    return InvalidArgumentError("block key must be 32 hex digits, got " +
                                std::to_string(hex.size()) + " characters");
  }
  BlockKey key;
  for (size_t i = 0; i < 32; ++i) {
    const char c = hex[i];
    uint64_t nibble = 0;
    if (c >= '0' && c <= '9')
      nibble = static_cast<uint64_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      nibble = static_cast<uint64_t>(c - 'a') + 10;
    else if (c >= 'A' && c <= 'F')
      nibble = static_cast<uint64_t>(c - 'A') + 10;
    else
      return InvalidArgumentError("block key has a non-hex character at position " +
                                  std::to_string(i));
    uint64_t& half = i < 16 ? key.hi : key.lo;
    half = (half << 4) | nibble;
  }
  return key;
}

BlockKey RootKey(std::string_view salt) {
  Sha256Writer w;
  w.Bytes("kvtier.root.v1", 14);
  w.String(salt);
  BlockKey key = w.Finish();
  key.hi &= ~kOpaqueBit;
  return key;
}

BlockKey ChainBlockKey(const BlockKey& parent, std::span<const uint32_t> tokens,
                       const BlockExtraKeys& extra) {
  Sha256Writer w;
  w.Bytes("kvtier.block.v1", 15);
  w.Key(parent);
  w.U64(extra.lora_id);
  w.String(extra.model_tag);
  w.U32(static_cast<uint32_t>(extra.extra.size()));
  for (const std::string& e : extra.extra) w.String(e);
  w.U32(static_cast<uint32_t>(tokens.size()));
  w.U32s(tokens);
  BlockKey key = w.Finish();
  key.hi &= ~kOpaqueBit;
  return key;
}

std::vector<BlockKey> ComputeBlockKeys(std::string_view salt, std::span<const uint32_t> tokens,
                                       uint32_t tokens_per_block, const BlockExtraKeys& extra) {
  std::vector<BlockKey> keys;
  if (tokens_per_block == 0) return keys;
  const size_t full_blocks = tokens.size() / tokens_per_block;
  keys.reserve(full_blocks);
  BlockKey parent = RootKey(salt);
  for (size_t i = 0; i < full_blocks; ++i) {
    parent = ChainBlockKey(parent, tokens.subspan(i * tokens_per_block, tokens_per_block), extra);
    keys.push_back(parent);
  }
  return keys;
}

uint64_t SaltScope(std::string_view salt) {
  Sha256Writer w;
  w.Bytes("kvtier.scope.v1", 15);
  w.String(salt);
  return w.Finish().hi;  // the first 8 bytes of the digest
}

KeySalt::KeySalt(std::string_view salt) : identity_(salt.empty()) {
  if (identity_) return;
  std::string message("kvtier.salt.v1");
  const auto size = static_cast<uint32_t>(salt.size());
  for (int i = 0; i < 4; ++i) message.push_back(static_cast<char>(size >> (8 * i)));
  message.append(salt);
  unsigned int written = 0;
  EVP_Digest(message.data(), message.size(), secret_.data(), &written, Sha256(), nullptr);
}

BlockKey KeySalt::Apply(const BlockKey& key) const {
  BlockKey salted = key;
  ApplyInPlace(std::span<BlockKey>(&salted, 1));
  return salted;
}

std::vector<BlockKey> KeySalt::Apply(std::vector<BlockKey> keys) const {
  ApplyInPlace(keys);
  return keys;
}

void KeySalt::ApplyInPlace(std::span<BlockKey> keys) const {
  if (identity_ || keys.empty()) return;
  Sha256Writer w;
  for (BlockKey& key : keys) {
    if (&key != keys.data()) w.Restart();
    w.Bytes("kvtier.salted.v1", 16);
    w.Bytes(secret_.data(), secret_.size());
    w.Key(key);
    const uint64_t opaque = key.hi & kOpaqueBit;
    key = w.Finish();
    key.hi = (key.hi & ~kOpaqueBit) | opaque;
  }
}

BlockKey KeySalt::Root() const { return Apply(RootKey("")); }

OpaqueKeyNamespace::OpaqueKeyNamespace(std::string_view engine_namespace, std::string_view salt) {
  Sha256Writer w;
  w.Bytes("kvtier.opaque.v1", 16);
  w.String(engine_namespace);
  w.String(salt);
  tag_ = w.Finish().hi | kOpaqueBit;
}

}  // namespace kvtier
