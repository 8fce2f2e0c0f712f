#include "storage/format_tag.h"

#include <array>
#include <functional>
#include <unordered_set>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace kvtier::storage {
namespace {

struct TagHash {
  using is_transparent = void;
  size_t operator()(std::string_view tag) const { return std::hash<std::string_view>{}(tag); }
};

// Every tag interned: a node-based set, so that each tag's address is stable. Never
// destroyed, so that tags held by other statics stay valid at exit.
class InternTable {
 public:
  static InternTable& Get() {
    static InternTable* table = new InternTable();
    return *table;
  }

  // The interned copy of `tag`, or null when it is new and `bounded` and the table holds
  // FormatTag::kMaxFormatTags tags.
  const std::string* Find(std::string_view tag, bool bounded) {
    // A thread handles a few formats at a time (a node serves a few models and layouts):
    // the ones it interned last need no lock.
    thread_local std::array<const std::string*, kRecent> recent{};
    thread_local size_t next = 0;
    for (const std::string* known : recent) {
      if (known != nullptr && *known == tag) return known;
    }
    MutexLock lock(mu_);
    auto it = tags_.find(tag);
    if (it == tags_.end()) {
      if (bounded && tags_.size() >= FormatTag::kMaxFormatTags) return nullptr;
      it = tags_.emplace(tag).first;
    }
    recent[next] = &*it;
    next = (next + 1) % kRecent;
    return &*it;
  }

 private:
  static constexpr size_t kRecent = 4;
  Mutex mu_;
  std::unordered_set<std::string, TagHash, std::equal_to<>> tags_ KVTIER_GUARDED_BY(mu_);
};

const std::string* EmptyTag() {
  static const std::string* empty = new std::string();
  return empty;
}

}  // namespace

FormatTag::FormatTag() : tag_(EmptyTag()) {}

FormatTag::FormatTag(std::string_view tag)
    : tag_(tag.empty() ? EmptyTag() : InternTable::Get().Find(tag, /*bounded=*/false)) {}

Result<FormatTag> FormatTag::Intern(std::string_view tag) {
  if (tag.empty()) return FormatTag();
  if (tag.size() > kMaxFormatTagBytes) {
    return InvalidArgumentError("format tag is " + std::to_string(tag.size()) + " bytes; at most " +
                                std::to_string(kMaxFormatTagBytes));
  }
  const std::string* interned = InternTable::Get().Find(tag, /*bounded=*/true);
  if (interned == nullptr) {
    return ResourceExhaustedError("format tag \"" + std::string(tag.substr(0, 64)) +
                                  "\" is new and " + std::to_string(kMaxFormatTags) +
                                  " distinct format tags are in use in this process already");
  }
  return FormatTag(interned);
}

}  // namespace kvtier::storage
