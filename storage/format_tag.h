// FormatTag: a stored block's format tag (block_header.h: model id, KvLayout fingerprint,
// quantization) as a handle to one interned copy of its bytes.
//
// Every header a tier hands out, every get's and put's header on the data stream, names
// its format. As a std::string each copy of a header allocated (a tag is longer than the
// small-string buffer); interned, a copy is a pointer copy and equality a pointer
// comparison, so the hot path allocates nothing per block. A process sees a handful of
// formats (one per model and layout it serves).
//
// Interning: tags this process makes itself (its layouts, its configuration, tests)
// intern through the constructors. Tags that arrive from other processes intern through
// Intern, which refuses a tag over kMaxFormatTagBytes (kInvalidArgument) and new tags
// past kMaxFormatTags (kResourceExhausted), so that a client sending long or distinct
// tags cannot grow the table without bound. Interned bytes live
// until the process ends.
//
// Thread safety: values; interning is safe from any thread (a lock, skipped when the tag
// is one of the last four this thread interned). REQUIRES: a tag of at most 65535 bytes.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kvtier::storage {

inline constexpr size_t kMaxFormatTagBytes = 255;

class FormatTag {
 public:
  // Distinct tags Intern accepts (at most about 17 MiB of tags); the constructors are
  // not bounded. A disk tier keeps a RocksDB column family per format, so no node holds
  // anywhere near as many.
  static constexpr size_t kMaxFormatTags = 65536;

  FormatTag();                      // the empty tag
  FormatTag(std::string_view tag);  // NOLINT: implicit, as the std::string it replaces
  FormatTag(const std::string& tag) : FormatTag(std::string_view(tag)) {}  // NOLINT
  FormatTag(const char* tag) : FormatTag(std::string_view(tag)) {}         // NOLINT

  // The tag of `tag`'s bytes; kInvalidArgument when they are over kMaxFormatTagBytes,
  // kResourceExhausted when they are new and kMaxFormatTags tags are interned already.
  [[nodiscard]] static Result<FormatTag> Intern(std::string_view tag);

  const std::string& str() const { return *tag_; }
  operator std::string_view() const { return *tag_; }    // NOLINT: implicit
  operator const std::string&() const { return *tag_; }  // NOLINT: implicit
  const char* data() const { return tag_->data(); }
  size_t size() const { return tag_->size(); }
  bool empty() const { return tag_->empty(); }

  friend bool operator==(const FormatTag& a, const FormatTag& b) { return a.tag_ == b.tag_; }
  friend bool operator==(const FormatTag& a, std::string_view b) { return *a.tag_ == b; }
  friend bool operator==(const FormatTag& a, const std::string& b) { return *a.tag_ == b; }
  friend bool operator==(const FormatTag& a, const char* b) { return *a.tag_ == b; }
  friend std::string operator+(const std::string& a, const FormatTag& b) { return a + *b.tag_; }
  friend std::string operator+(const char* a, const FormatTag& b) { return a + *b.tag_; }
  friend std::string operator+(const FormatTag& a, const std::string& b) { return *a.tag_ + b; }
  friend std::string operator+(const FormatTag& a, const char* b) { return *a.tag_ + b; }
  friend std::ostream& operator<<(std::ostream& os, const FormatTag& tag) {
    return os << *tag.tag_;
  }

 private:
  explicit FormatTag(const std::string* interned) : tag_(interned) {}
  const std::string* tag_;  // never null; interned, never freed
};

}  // namespace kvtier::storage
