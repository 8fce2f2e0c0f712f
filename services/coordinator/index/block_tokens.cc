#include "services/coordinator/index/block_tokens.h"

#include <algorithm>

namespace kvtier::coordinator::internal {

void BlockTokens::SparseTable::Set(uint32_t i, uint32_t value) {
  const size_t page = i >> kPageBits;
  if (page >= pages_.size()) pages_.resize(page + 1);
  if (!pages_[page]) {
    if (value == kNone) return;  // unwritten entries read kNone already
    pages_[page] = std::make_unique<uint32_t[]>(size_t{1} << kPageBits);
    std::fill_n(pages_[page].get(), size_t{1} << kPageBits, kNone);
    ++allocated_pages_;
  }
  pages_[page][i & kPageMask] = value;
}

size_t BlockTokens::SparseTable::memory_bytes() const {
  return pages_.capacity() * sizeof(pages_[0]) + allocated_pages_ * (sizeof(uint32_t) << kPageBits);
}

uint32_t BlockTokens::Head(uint64_t group) const {
  if (group >> 32 == 0) return first_child_.Get(static_cast<uint32_t>(group));
  const auto it = root_heads_.find(static_cast<uint16_t>(group));
  return it == root_heads_.end() ? kNone : it->second;
}

void BlockTokens::SetHead(uint64_t group, uint32_t block) {
  if (group >> 32 == 0) {
    first_child_.Set(static_cast<uint32_t>(group), block);
  } else if (block == kNone) {
    root_heads_.erase(static_cast<uint16_t>(group));
  } else {
    root_heads_[static_cast<uint16_t>(group)] = block;
  }
}

uint32_t BlockTokens::Allocate(uint32_t words) {
  for (auto& [size, offsets] : free_) {
    if (size != words || offsets.empty()) continue;
    const uint32_t offset = offsets.back();
    offsets.pop_back();
    return offset;
  }
  const size_t offset = arena_.size();
  // Grow by half, not double: the arena holds most of this table's memory.
  if (offset + words > arena_.capacity())
    arena_.reserve(std::max(offset + words, arena_.capacity() * 3 / 2));
  arena_.resize(offset + words);
  return static_cast<uint32_t>(offset);
}

void BlockTokens::Release(uint32_t offset, uint32_t words) {
  for (auto& [size, offsets] : free_) {
    if (size == words) {
      offsets.push_back(offset);
      return;
    }
  }
  free_.emplace_back(words, std::vector<uint32_t>{offset});
}

void BlockTokens::Set(uint32_t block, uint64_t group, std::span<const uint32_t> tokens) {
  const auto words = static_cast<uint32_t>(kHeaderWords + tokens.size());
  const uint32_t offset = Allocate(words);
  const uint32_t head = Head(group);
  uint32_t* record = arena_.data() + offset;
  record[kCount] = static_cast<uint32_t>(tokens.size());
  record[kPrev] = kNone;
  record[kNext] = head;
  std::copy(tokens.begin(), tokens.end(), record + kHeaderWords);
  if (head != kNone) arena_[record_of_.Get(head) + kPrev] = block;
  SetHead(group, block);
  record_of_.Set(block, offset);
  ++blocks_;
}

void BlockTokens::Erase(uint32_t block, uint64_t group) {
  const uint32_t offset = record_of_.Get(block);
  if (offset == kNone) return;
  const uint32_t prev = arena_[offset + kPrev];
  const uint32_t next = arena_[offset + kNext];
  if (prev == kNone) {
    SetHead(group, next);
  } else {
    arena_[record_of_.Get(prev) + kNext] = next;
  }
  if (next != kNone) arena_[record_of_.Get(next) + kPrev] = prev;
  Release(offset, kHeaderWords + arena_[offset + kCount]);
  record_of_.Set(block, kNone);
  if (--blocks_ == 0) *this = BlockTokens();  // the last one gone: give the arena and tables back
}

size_t BlockTokens::memory_bytes() const {
  size_t bytes = arena_.capacity() * sizeof(uint32_t) + record_of_.memory_bytes() +
                 first_child_.memory_bytes();
  for (const auto& [size, offsets] : free_)
    bytes += sizeof(free_[0]) + offsets.capacity() * sizeof(uint32_t);
  // An unordered_map node: the pair, the next link and the cached hash; plus its bucket.
  return bytes + root_heads_.size() * (sizeof(std::pair<uint16_t, uint32_t>) + 3 * sizeof(void*));
}

}  // namespace kvtier::coordinator::internal
