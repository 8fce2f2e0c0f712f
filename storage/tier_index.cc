#include "storage/tier_index.h"

namespace kvtier::storage {

uint32_t TierIndex::FormatId(std::string_view format_tag) const {
  auto it = format_ids_.find(format_tag);
  return it == format_ids_.end() ? kNil : it->second;
}

uint32_t TierIndex::InternFormat(std::string_view format_tag) {
  const uint32_t existing = FormatId(format_tag);
  if (existing != kNil) return existing;
  formats_.emplace_back(format_tag);
  const auto id = static_cast<uint32_t>(formats_.size() - 1);
  format_ids_.emplace(formats_.back(), id);
  return id;
}

uint32_t TierIndex::Find(const BlockKey& key, std::string_view format_tag) const {
  const uint32_t format = FormatId(format_tag);
  if (format == kNil) return kNil;
  const uint32_t id = by_key_.Find(format, key);
  return id == KeySlots::kEmpty ? kNil : id;
}

uint32_t TierIndex::Insert(const BlockHeader& header, uint64_t units, uint64_t location) {
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<uint32_t>(entries_.size());
    entries_.emplace_back();
    lru_.Grow(static_cast<uint32_t>(entries_.size()));
  }
  Entry& entry = entries_[id];
  entry.header = header;
  entry.units = units;
  entry.location = location;
  entry.live = true;
  by_key_.Insert(InternFormat(header.format_tag), header.key, id);
  units_ += units;
  SetPolicy(id, header);
  return id;
}

uint32_t TierIndex::Restore(const BlockHeader& header, uint64_t units, uint64_t location) {
  const uint32_t id = Insert(header, units, location);
  lru_.Remove(id);
  lru_.PushLeastRecent(id, EffectivePriority(id));
  return id;
}

void TierIndex::Erase(uint32_t id) {
  Entry& entry = entries_[id];
  by_key_.Erase(FormatId(entry.header.format_tag), entry.header.key);
  if (lru_.Contains(id)) lru_.Remove(id);
  units_ -= entry.units;
  entry.live = false;
  entry.held = false;
  ++entry.generation;  // stale deadlines of this id are skipped
  entry.header = BlockHeader{};
  free_ids_.push_back(id);
}

void TierIndex::SetPolicy(uint32_t id, const BlockHeader& header) {
  Entry& entry = entries_[id];
  entry.header.priority = header.priority;
  entry.header.retention_left_ms = header.retention_left_ms;
  entry.deadline_ns = 0;
  ++entry.generation;  // an earlier deadline of this entry no longer applies
  if (header.retention_left_ms != 0) {
    entry.deadline_ns = NowNs() + static_cast<int64_t>(header.retention_left_ms) * 1'000'000;
    deadlines_.Push(Deadline{entry.deadline_ns, id, entry.generation},
                    [this](const Deadline& d) { return DeadlineLive(d); });
  }
  if (lru_.Contains(id)) lru_.Remove(id);
  if (!entry.held) lru_.PushMostRecent(id, EffectivePriority(id));
}

void TierIndex::Refresh(uint32_t id, const BlockHeader& header) { SetPolicy(id, header); }

void TierIndex::Touch(uint32_t id) {
  if (entries_[id].held) return;
  lru_.Remove(id);
  lru_.PushMostRecent(id, EffectivePriority(id));
}

void TierIndex::Hold(uint32_t id) {
  entries_[id].held = true;
  if (lru_.Contains(id)) lru_.Remove(id);
}

uint8_t TierIndex::EffectivePriority(uint32_t id) const {
  const Entry& entry = entries_[id];
  if (entry.deadline_ns != 0 && NowNs() >= entry.deadline_ns) return kDefaultPriority;
  return entry.header.priority;
}

BlockHeader TierIndex::CurrentHeader(uint32_t id) const {
  const Entry& entry = entries_[id];
  BlockHeader header = entry.header;
  if (entry.deadline_ns != 0) {
    const int64_t left_ns = entry.deadline_ns - NowNs();
    if (left_ns <= 0) {
      header.priority = kDefaultPriority;
      header.retention_left_ms = 0;
    } else {
      header.retention_left_ms = static_cast<uint64_t>((left_ns + 999'999) / 1'000'000);
    }
  }
  return header;
}

void TierIndex::ApplyDeadlines() {
  deadlines_.PopDue(
      NowNs(), [this](const Deadline& d) { return DeadlineLive(d); },
      [this](const Deadline& due) {
        if (lru_.Contains(due.id) && lru_.priority(due.id) != kDefaultPriority) {
          lru_.Remove(due.id);
          lru_.PushMostRecent(due.id, kDefaultPriority);
        }
      });
}

uint32_t TierIndex::Victim() {
  ApplyDeadlines();
  return lru_.FindVictim([](uint32_t) { return true; });
}

std::vector<uint32_t> TierIndex::VictimsFor(uint64_t units) {
  ApplyDeadlines();
  std::vector<uint32_t> victims;
  uint64_t taken = 0;
  if (units == 0) return victims;
  lru_.FindVictim([&](uint32_t id) {
    victims.push_back(id);
    taken += entries_[id].units;
    return taken >= units;
  });
  return victims;
}

std::vector<BlockHeader> TierIndex::CurrentHeaders() const {
  std::vector<BlockHeader> headers;
  headers.reserve(size());
  ForEach([&](uint32_t id) { headers.push_back(CurrentHeader(id)); });
  return headers;
}

}  // namespace kvtier::storage
