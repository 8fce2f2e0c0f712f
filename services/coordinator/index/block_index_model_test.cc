// BlockIndex against a brute-force model: long random sequences of stores, touches,
// evictions, removals and node departures give the same lookups, holdings and eviction
// order as a model that recomputes everything from plain maps.
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "services/coordinator/index/block_index.h"

namespace kvtier::coordinator {
namespace {

// Places are (node, tier); the model keeps per (key, place) a recency stamp.
struct ModelBlock {
  std::optional<BlockKey> parent;
  uint8_t priority = kDefaultPriority;
  std::map<std::pair<NodeId, Tier>, uint64_t> stamps;  // place -> last-use stamp
};

class Model {
 public:
  void Store(const std::vector<BlockKey>& keys, std::optional<BlockKey> parent, Location where, uint8_t priority) {
    const auto place = std::make_pair(where.node, where.tier);
    for (const BlockKey& key : keys) {
      ModelBlock& block = blocks_[key];
      block.parent = parent;
      if (block.priority != priority) {  // a priority change renews every place of the block
        block.priority = priority;
        for (auto& [p, stamp] : block.stamps) stamp = ++clock_;
      }
      block.stamps.try_emplace(place, 0);
      parent = key;
    }
    for (auto it = keys.rbegin(); it != keys.rend(); ++it) blocks_[*it].stamps[place] = ++clock_;
  }

  void Touch(NodeId node, const std::vector<BlockKey>& keys) {
    size_t held = 0;  // the prefix the node holds
    std::optional<BlockKey> parent;
    for (; held < keys.size(); ++held) {
      auto it = blocks_.find(keys[held]);
      if (it == blocks_.end() || it->second.parent != parent) break;
      if (std::none_of(it->second.stamps.begin(), it->second.stamps.end(),
                       [&](const auto& e) { return e.first.first == node; })) break;
      parent = keys[held];
    }
    for (size_t i = held; i-- > 0;) {
      for (auto& [place, stamp] : blocks_[keys[i]].stamps) {
        if (place.first == node) stamp = ++clock_;
      }
    }
  }

  size_t MatchedPrefix(const std::vector<BlockKey>& keys) const {
    std::optional<BlockKey> parent;
    size_t i = 0;
    for (; i < keys.size(); ++i) {
      auto it = blocks_.find(keys[i]);
      if (it == blocks_.end() || it->second.parent != parent || it->second.stamps.empty()) break;
      parent = keys[i];
    }
    return i;
  }

  bool HasChildAt(const BlockKey& key, std::pair<NodeId, Tier> place) const {
    for (const auto& [k, b] : blocks_) {
      if (b.parent == key && b.stamps.count(place)) return true;
    }
    return false;
  }

  std::vector<BlockKey> Evict(NodeId node, Tier tier, size_t count) {
    const auto place = std::make_pair(node, tier);
    std::vector<BlockKey> out;
    while (out.size() < count) {
      std::optional<BlockKey> victim;
      std::pair<uint8_t, uint64_t> best{255, 0};
      for (const auto& [key, block] : blocks_) {
        auto it = block.stamps.find(place);
        if (it == block.stamps.end() || HasChildAt(key, place)) continue;
        const std::pair<uint8_t, uint64_t> rank{block.priority, it->second};
        if (!victim || rank < best) victim = key, best = rank;
      }
      if (!victim) break;
      out.push_back(*victim);
      Remove(*victim, place);
    }
    return out;
  }

  void Remove(const BlockKey& key, std::pair<NodeId, Tier> place) {
    auto it = blocks_.find(key);
    if (it != blocks_.end()) it->second.stamps.erase(place);
    Collect();
  }

  void RemoveNode(NodeId node) {
    for (auto& [key, block] : blocks_) std::erase_if(block.stamps, [&](const auto& e) { return e.first.first == node; });
    Collect();
  }

  size_t Held(NodeId node, Tier tier) const {
    size_t n = 0;
    for (const auto& [key, block] : blocks_) n += block.stamps.count({node, tier});
    return n;
  }

  const std::map<BlockKey, ModelBlock>& blocks() const { return blocks_; }

 private:
  // Blocks with no location and no children disappear.
  void Collect() {
    bool changed = true;
    while (changed) {
      changed = false;
      for (auto it = blocks_.begin(); it != blocks_.end();) {
        const bool has_child = std::any_of(blocks_.begin(), blocks_.end(),
                                           [&](const auto& e) { return e.second.parent == it->first; });
        if (it->second.stamps.empty() && !has_child) {
          it = blocks_.erase(it);
          changed = true;
        } else {
          ++it;
        }
      }
    }
  }

  std::map<BlockKey, ModelBlock> blocks_;
  uint64_t clock_ = 0;
};

TEST(BlockIndexModelTest, RandomOperationsMatchTheModel) {
  std::mt19937_64 rng(20261122);
  const OpaqueKeyNamespace ns("model", "");
  // A forest of prompt chains: 12 chains of up to 6 blocks sharing prefixes of 0-3 blocks.
  std::vector<std::vector<BlockKey>> prompts;
  for (uint64_t p = 0; p < 12; ++p) {
    std::vector<BlockKey> keys;
    const size_t shared = p == 0 ? 0 : rng() % 4;
    for (size_t i = 0; i < shared && i < prompts[p - 1].size(); ++i) keys.push_back(prompts[p - 1][i]);
    while (keys.size() < 2 + rng() % 5) keys.push_back(ns.Key(1000 * (p + 1) + keys.size()));
    prompts.push_back(keys);
  }
  std::unique_ptr<BlockIndex> index = *BlockIndex::Create({});
  Model model;
  const NodeId kNodes = 3;
  for (int step = 0; step < 4000; ++step) {
    const auto& prompt = prompts[rng() % prompts.size()];
    const Location where{static_cast<NodeId>(rng() % kNodes), static_cast<Tier>(rng() % 2), 0};
    switch (rng() % 6) {
      case 0:
      case 1: {  // store a prefix of the prompt (as a chain from the root)
        const size_t n = 1 + rng() % prompt.size();
        const std::vector<BlockKey> keys(prompt.begin(), prompt.begin() + static_cast<long>(n));
        const uint8_t priority = static_cast<uint8_t>(rng() % 3 == 0 ? 20 + 30 * (rng() % 3) : kDefaultPriority);
        const std::vector<BlockRetention> retention(n, BlockRetention{priority, {}});
        ASSERT_TRUE(index->Store({0, std::nullopt, keys, where, retention}).ok()) << "step " << step;
        model.Store(keys, std::nullopt, where, priority);
        break;
      }
      case 2:
        index->Touch(where.node, 0, prompt);
        model.Touch(where.node, prompt);
        break;
      case 3: {
        const size_t count = 1 + rng() % 3;
        ASSERT_EQ(index->Evict(where.node, where.tier, count), model.Evict(where.node, where.tier, count))
            << "step " << step;
        break;
      }
      case 4: {
        const BlockKey& key = prompt[rng() % prompt.size()];
        index->Remove(where.node, where.tier, std::vector<BlockKey>{key});
        model.Remove(key, {where.node, where.tier});
        break;
      }
      case 5:
        if (rng() % 10 == 0) {
          index->RemoveNode(where.node);
          model.RemoveNode(where.node);
        }
        break;
    }
    // Every prompt looks up the same in both.
    for (const auto& p : prompts) {
      const LookupResult result = index->Lookup(0, p);
      ASSERT_EQ(result.matched_blocks, model.MatchedPrefix(p)) << "step " << step;
      for (uint32_t i = 0; i < result.matched_blocks; ++i) {
        std::set<std::pair<NodeId, int>> got, want;
        for (const Location& l : result.LocationsOf(i)) got.insert({l.node, static_cast<int>(l.tier)});
        for (const auto& [place, stamp] : model.blocks().at(p[i]).stamps) want.insert({place.first, static_cast<int>(place.second)});
        ASSERT_EQ(got, want) << "step " << step << " block " << i;
      }
    }
    for (NodeId n = 0; n < kNodes; ++n) {
      for (Tier t : {Tier::kGpu, Tier::kHost}) ASSERT_EQ(index->Held(n, t), model.Held(n, t)) << "step " << step;
    }
    ASSERT_EQ(index->Stats().blocks, model.blocks().size()) << "step " << step;
  }
}

}  // namespace
}  // namespace kvtier::coordinator
