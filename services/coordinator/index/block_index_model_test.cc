// BlockIndex against a brute-force model: long random sequences of stores (some with
// their blocks' tokens), touches, evictions, removals and node departures give the same
// lookups, partial matches, holdings and eviction order as a model that recomputes
// everything from plain maps, for full-attention and windowed pools alike.
#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "services/coordinator/index/block_index.h"

namespace kvtier::coordinator {
namespace {

using Place = std::tuple<NodeId, Tier, uint16_t>;  // node, tier, pool

Place PlaceOf(Location l) { return {l.node, l.tier, l.pool}; }

// The model keeps per (key, place) a recency stamp.
struct ModelBlock {
  std::optional<BlockKey> parent;
  uint8_t priority = kDefaultPriority;
  std::map<Place, uint64_t> stamps;  // place -> last-use stamp
  std::vector<uint32_t> tokens;      // kept from the first store that carried them
};

// What a tail of tokens after a matched prefix should partially match.
struct ModelPartial {
  uint32_t tokens = 0;                            // most leading tokens any child shares
  std::set<BlockKey> best;                        // the children sharing that many
  std::map<NodeId, std::set<uint32_t>> per_node;  // tokens a node's best weighted share may report
};

constexpr uint32_t kTokensPerBlock = 4;

// A block's tokens follow from its key (a key commits to them); drawn from 3 values so
// that siblings often begin alike.
std::vector<uint32_t> TokensOf(const BlockKey& key) {
  uint64_t bits = (key.lo ^ (key.hi << 1)) *
                  0x9e3779b97f4a7c15ULL;  // the test's keys are small numbers: mix them
  std::vector<uint32_t> tokens;
  for (uint32_t i = 0; i < kTokensPerBlock; ++i) tokens.push_back(1 + (bits >> (40 + 6 * i)) % 3);
  return tokens;
}

class Model {
 public:
  explicit Model(std::map<Place, PoolWindow> windows) : windows_(std::move(windows)) {}

  void Store(const std::vector<BlockKey>& keys, std::optional<BlockKey> parent, Place place,
             uint8_t priority, bool with_tokens) {
    for (const BlockKey& key : keys) {
      ModelBlock& block = blocks_[key];
      block.parent = parent;
      if (with_tokens && block.tokens.empty()) block.tokens = TokensOf(key);
      if (block.priority != priority) {  // a priority change renews every place of the block
        block.priority = priority;
        for (auto& [p, stamp] : block.stamps) stamp = ++clock_;
      }
      block.stamps.try_emplace(place, 0);
      parent = key;
    }
    const auto window = windows_.find(place);
    if (window == windows_.end()) {  // leaf to root: ancestors more recent
      for (auto it = keys.rbegin(); it != keys.rend(); ++it) blocks_[*it].stamps[place] = ++clock_;
      return;
    }
    for (const BlockKey& key : keys)
      blocks_[key].stamps[place] = ++clock_;  // root to leaf, then sinks
    for (const BlockKey& key : keys) {
      if (Depth(key) < window->second.sink_blocks) blocks_[key].stamps[place] = ++clock_;
    }
  }

  // The blocks of `keys` that the index has as a chain from the root.
  size_t IndexedPrefix(const std::vector<BlockKey>& keys) const {
    std::optional<BlockKey> parent;
    size_t i = 0;
    for (; i < keys.size(); ++i) {
      auto it = blocks_.find(keys[i]);
      if (it == blocks_.end() || it->second.parent != parent) break;
      parent = keys[i];
    }
    return i;
  }

  // Full-attention places: the prefix the node holds there, renewed leaf to root. Each
  // windowed place: the last window of the prefix it serves (root to leaf), then sinks.
  void Touch(NodeId node, const std::vector<BlockKey>& keys) {
    std::vector<BlockKey> chain;
    size_t full_prefix = 0;
    for (size_t i = 0; i < IndexedPrefix(keys); ++i) {
      bool held_here = false, held_full = false;
      for (const auto& [place, stamp] : blocks_[keys[i]].stamps) {
        if (std::get<0>(place) != node) continue;
        held_here = true;
        held_full |= !windows_.count(place);
      }
      if (!held_here && !HasWindows(node)) break;
      if (held_full && full_prefix == chain.size()) ++full_prefix;
      chain.push_back(keys[i]);
    }
    for (size_t i = full_prefix; i-- > 0;) {
      for (auto& [place, stamp] : blocks_[chain[i]].stamps) {
        if (std::get<0>(place) == node && !windows_.count(place)) stamp = ++clock_;
      }
    }
    for (const auto& [place, window] : windows_) {
      if (std::get<0>(place) != node) continue;
      const size_t served = Served(chain, place, window);
      const size_t sinks = std::min<size_t>(window.sink_blocks, served);
      const size_t from =
          std::max(sinks, served > window.window_blocks ? served - window.window_blocks : 0);
      for (size_t i = from; i < served; ++i) blocks_[chain[i]].stamps[place] = ++clock_;
      for (size_t i = 0; i < sinks; ++i) blocks_[chain[i]].stamps[place] = ++clock_;
    }
  }

  // The longest prefix of `chain` whose sinks and last window `place` holds.
  size_t Served(const std::vector<BlockKey>& chain, Place place, PoolWindow window) const {
    size_t served = 0;
    for (size_t m = 1; m <= chain.size(); ++m) {
      bool ok = true;
      for (size_t i = 0; i < m; ++i) {
        const bool needed = i < window.sink_blocks || i + window.window_blocks >= m;
        if (needed && !blocks_.at(chain[i]).stamps.count(place)) ok = false;
      }
      if (ok) served = m;
    }
    return served;
  }

  // Every block has a location, or a windowed pool holds the sinks and the last W blocks.
  size_t MatchedPrefix(const std::vector<BlockKey>& keys) const {
    const size_t indexed = IndexedPrefix(keys);
    size_t matched = 0;
    while (matched < indexed && !blocks_.at(keys[matched]).stamps.empty()) ++matched;
    const std::vector<BlockKey> chain(keys.begin(), keys.begin() + static_cast<long>(indexed));
    for (const auto& [place, window] : windows_)
      matched = std::max(matched, Served(chain, place, window));
    return matched;
  }

  // The children of the prefix `keys` (every block matched) that hold tokens and a
  // location, compared with `tail`. A node's share of a child is its tier's weight times
  // the part of the child's tokens matched; it reports the tokens of its best share.
  ModelPartial Partial(const std::vector<BlockKey>& keys, const std::vector<uint32_t>& tail,
                       const std::array<double, kTierCount>& weights) const {
    ModelPartial partial;
    std::map<NodeId, double> node_share;
    for (const auto& [key, block] : blocks_) {
      const bool child = keys.empty() ? !block.parent.has_value() : block.parent == keys.back();
      if (!child || block.tokens.empty() || block.stamps.empty()) continue;
      uint32_t shared = 0;
      while (shared < tail.size() && shared < block.tokens.size() &&
             tail[shared] == block.tokens[shared])
        ++shared;
      if (shared == 0) continue;
      if (shared > partial.tokens) partial.best.clear();
      if (shared >= partial.tokens) partial.best.insert(key);
      partial.tokens = std::max(partial.tokens, shared);
      for (const auto& [place, stamp] : block.stamps) {
        const NodeId node = std::get<0>(place);
        const double share =
            weights[static_cast<int>(std::get<1>(place))] * shared / block.tokens.size();
        if (share > node_share[node]) partial.per_node[node].clear();
        if (share >= node_share[node]) partial.per_node[node].insert(shared);
        node_share[node] = std::max(node_share[node], share);
      }
    }
    return partial;
  }

  std::vector<BlockKey> Evict(NodeId node, Tier tier, size_t count) {
    std::vector<BlockKey> out;
    while (out.size() < count) {
      std::optional<std::pair<BlockKey, Place>> victim;
      std::pair<uint8_t, uint64_t> best{255, 0};
      for (const auto& [key, block] : blocks_) {
        for (const auto& [place, stamp] : block.stamps) {
          if (std::get<0>(place) != node || std::get<1>(place) != tier || !Evictable(key, place))
            continue;
          const std::pair<uint8_t, uint64_t> rank{block.priority, stamp};
          if (!victim || rank < best) victim = {key, place}, best = rank;
        }
      }
      if (!victim) break;
      if (windows_.count(victim->second) && !IsLeaf(victim->first, victim->second))
        ++interior_evictions_;
      out.push_back(victim->first);
      Remove(victim->first, victim->second);
    }
    return out;
  }

  void Remove(const BlockKey& key, Place place) {
    auto it = blocks_.find(key);
    if (it != blocks_.end()) it->second.stamps.erase(place);
    Collect();
  }

  void RemoveNode(NodeId node) {
    for (auto& [key, block] : blocks_) {
      std::erase_if(block.stamps, [&](const auto& e) { return std::get<0>(e.first) == node; });
    }
    Collect();
  }

  size_t Held(NodeId node, Tier tier) const {
    size_t n = 0;
    for (const auto& [key, block] : blocks_) {
      for (const auto& [place, stamp] : block.stamps)
        n += std::get<0>(place) == node && std::get<1>(place) == tier;
    }
    return n;
  }

  const std::map<BlockKey, ModelBlock>& blocks() const { return blocks_; }
  // Interior blocks a windowed pool evicted: the rule under test did come up.
  size_t interior_evictions() const { return interior_evictions_; }

 private:
  bool HasWindows(NodeId node) const {
    return std::any_of(windows_.begin(), windows_.end(),
                       [&](const auto& w) { return std::get<0>(w.first) == node; });
  }

  // How many blocks `key` lies below `ancestor`; nullopt when it is not below it.
  std::optional<size_t> Distance(BlockKey key, const BlockKey& ancestor) const {
    for (size_t d = 0;; ++d) {
      if (key == ancestor) return d;
      const auto& parent = blocks_.at(key).parent;
      if (!parent) return std::nullopt;
      key = *parent;
    }
  }

  size_t Depth(const BlockKey& key) const {
    size_t depth = 0;
    for (auto parent = blocks_.at(key).parent; parent; parent = blocks_.at(*parent).parent) ++depth;
    return depth;
  }

  // Full attention: no child held here. Windowed: nothing below held here (a leaf), or a
  // non-sink with no leaf held here within W - 1 blocks below.
  bool Evictable(const BlockKey& key, Place place) const {
    const auto window = windows_.find(place);
    if (window == windows_.end()) {
      return std::none_of(blocks_.begin(), blocks_.end(), [&](const auto& e) {
        return e.second.parent == key && e.second.stamps.count(place);
      });
    }
    bool held_below = false, leaf_in_window = false;
    for (const auto& [other, block] : blocks_) {
      const auto d = Distance(other, key);
      if (!d || *d == 0 || !block.stamps.count(place)) continue;
      held_below = true;
      if (*d < window->second.window_blocks && IsLeaf(other, place)) leaf_in_window = true;
    }
    return !held_below || (!leaf_in_window && Depth(key) >= window->second.sink_blocks);
  }

  bool IsLeaf(const BlockKey& key, Place place) const {
    for (const auto& [other, block] : blocks_) {
      const auto d = Distance(other, key);
      if (d && *d > 0 && block.stamps.count(place)) return false;
    }
    return true;
  }

  // Blocks with no location and no children disappear.
  void Collect() {
    bool changed = true;
    while (changed) {
      changed = false;
      for (auto it = blocks_.begin(); it != blocks_.end();) {
        const bool has_child = std::any_of(blocks_.begin(), blocks_.end(), [&](const auto& e) {
          return e.second.parent == it->first;
        });
        if (it->second.stamps.empty() && !has_child) {
          it = blocks_.erase(it);
          changed = true;
        } else {
          ++it;
        }
      }
    }
  }

  std::map<Place, PoolWindow> windows_;
  std::map<BlockKey, ModelBlock> blocks_;
  uint64_t clock_ = 0;
  size_t interior_evictions_ = 0;
};

// A forest of prompt chains: 12 chains of up to 8 blocks sharing prefixes of 0-3 blocks.
std::vector<std::vector<BlockKey>> Prompts(std::mt19937_64& rng) {
  const OpaqueKeyNamespace ns("model", "");
  std::vector<std::vector<BlockKey>> prompts;
  for (uint64_t p = 0; p < 12; ++p) {
    std::vector<BlockKey> keys;
    const size_t shared = p == 0 ? 0 : rng() % 4;
    for (size_t i = 0; i < shared && i < prompts[p - 1].size(); ++i)
      keys.push_back(prompts[p - 1][i]);
    while (keys.size() < 2 + rng() % 7) keys.push_back(ns.Key(1000 * (p + 1) + keys.size()));
    prompts.push_back(keys);
  }
  return prompts;
}

// A lookup of a random prefix of `prompt` with a tail: the tokens of the block after it
// (1 to 4 of them, the last one sometimes changed) must match as the model says.
void ExpectSamePartialMatch(const BlockIndex& index, const Model& model,
                            const std::vector<BlockKey>& prompt, std::mt19937_64& rng, int step,
                            size_t& partial_matches) {
  const size_t cut = rng() % prompt.size();
  const std::vector<BlockKey> keys(prompt.begin(), prompt.begin() + static_cast<long>(cut));
  std::vector<uint32_t> tail = TokensOf(prompt[cut]);
  tail.resize(1 + rng() % kTokensPerBlock);
  if (rng() % 3 == 0) tail.back() = 1 + rng() % 3;
  const LookupResult result = index.Lookup(0, keys, tail);
  SCOPED_TRACE("step " + std::to_string(step) + ", " + std::to_string(cut) + " blocks and " +
               std::to_string(tail.size()) + " tail tokens");
  ASSERT_EQ(result.matched_blocks, model.MatchedPrefix(keys));
  if (result.matched_blocks < keys.size()) {
    ASSERT_EQ(result.partial.tokens, 0u) << "only a whole prefix is followed by a partial block";
    return;
  }
  const ModelPartial want = model.Partial(keys, tail, BlockIndexOptions{}.tier_weights);
  ASSERT_EQ(result.partial.tokens, want.tokens);
  if (want.tokens > 0) {
    ++partial_matches;
    ASSERT_EQ(result.partial.block_tokens, kTokensPerBlock);
    ASSERT_TRUE(want.best.contains(result.partial.key));
    std::set<Place> got, held;
    for (const Location& l : result.partial.locations) got.insert(PlaceOf(l));
    for (const auto& [place, stamp] : model.blocks().at(result.partial.key).stamps)
      held.insert(place);
    ASSERT_EQ(got, held);
  }
  ASSERT_TRUE(std::ranges::is_sorted(result.scores, std::greater<>(), &NodeScore::score))
      << "best score first";
  for (const NodeScore& score : result.scores) {
    const auto node = want.per_node.find(score.node);
    if (score.prefix_blocks == cut && node != want.per_node.end()) {
      ASSERT_TRUE(node->second.contains(score.partial_tokens))
          << "node " << score.node << ": " << score.partial_tokens;
    } else {
      ASSERT_EQ(score.partial_tokens, 0u) << "node " << score.node;
    }
  }
  if (cut == 0) {  // no prefix to hold: every node holding a matching first block scores
    for (const auto& held : want.per_node) {
      const auto& node =
          held.first;  // named apart: a lambda cannot capture a structured binding before clang 16
      ASSERT_TRUE(
          std::ranges::any_of(result.scores, [&](const NodeScore& s) { return s.node == node; }))
          << "node " << node;
    }
  }
}

TEST(BlockIndexModelTest, RandomOperationsMatchTheModel) {
  std::mt19937_64 rng(20261122);
  const auto prompts = Prompts(rng);
  // Pool 0 of every node and tier is full attention; pool 1 on the GPU of node 0 has a
  // window of 3 blocks with 1 sink, of node 1 a window of 2 without sinks; node 2 has none.
  const std::vector<PoolWindowSpec> windows = {{{0, Tier::kGpu, 1}, {3, 1}},
                                               {{1, Tier::kGpu, 1}, {2, 0}}};
  std::unique_ptr<BlockIndex> index = *BlockIndex::Create({});
  std::map<Place, PoolWindow> model_windows;
  for (const PoolWindowSpec& w : windows) {
    ASSERT_TRUE(index->SetNodeWindows(w.pool.node, std::vector<PoolWindowSpec>{w}).ok());
    model_windows[PlaceOf(w.pool)] = w.window;
  }
  Model model(model_windows);
  std::mt19937_64 tail_rng(7);  // apart from `rng`, so the operations stay as they were
  size_t partial_matches = 0;
  const NodeId kNodes = 3;
  for (int step = 0; step < 20000; ++step) {
    const auto& prompt = prompts[rng() % prompts.size()];
    const Tier tier = static_cast<Tier>(rng() % 2);
    const Location where{static_cast<NodeId>(rng() % kNodes), tier,
                         static_cast<uint16_t>(tier == Tier::kGpu ? rng() % 2 : 0)};
    switch (rng() % 6) {
      case 0:
      case 1: {  // store a prefix of the prompt (as a chain from the root)
        const size_t n = 1 + rng() % prompt.size();
        const std::vector<BlockKey> keys(prompt.begin(), prompt.begin() + static_cast<long>(n));
        const uint8_t priority =
            static_cast<uint8_t>(rng() % 3 == 0 ? 20 + 30 * (rng() % 3) : kDefaultPriority);
        const std::vector<BlockRetention> retention(n, BlockRetention{priority, {}});
        const bool with_tokens = rng() % 2 == 0;  // half the nodes' events carry tokens
        std::vector<uint32_t> tokens;
        for (const BlockKey& key : keys) {
          if (with_tokens) std::ranges::copy(TokensOf(key), std::back_inserter(tokens));
        }
        StoreRequest request{0, std::nullopt, keys, where, retention};
        request.tokens = tokens;
        ASSERT_TRUE(index->Store(request).ok()) << "step " << step;
        model.Store(keys, std::nullopt, PlaceOf(where), priority, with_tokens);
        break;
      }
      case 2:
        index->Touch(where.node, 0, prompt);
        model.Touch(where.node, prompt);
        break;
      case 3: {
        const size_t count = 1 + rng() % 3;
        ASSERT_EQ(index->Evict(where.node, where.tier, count),
                  model.Evict(where.node, where.tier, count))
            << "step " << step;
        break;
      }
      case 4: {
        const BlockKey& key = prompt[rng() % prompt.size()];
        index->Remove(where, std::vector<BlockKey>{key});
        model.Remove(key, PlaceOf(where));
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
        std::set<Place> got, want;
        for (const Location& l : result.LocationsOf(i)) got.insert(PlaceOf(l));
        for (const auto& [place, stamp] : model.blocks().at(p[i]).stamps) want.insert(place);
        ASSERT_EQ(got, want) << "step " << step << " block " << i;
      }
    }
    for (const auto& p : prompts)
      ExpectSamePartialMatch(*index, model, p, tail_rng, step, partial_matches);
    for (NodeId n = 0; n < kNodes; ++n) {
      for (Tier t : {Tier::kGpu, Tier::kHost})
        ASSERT_EQ(index->Held(n, t), model.Held(n, t)) << "step " << step;
    }
    ASSERT_EQ(index->Stats().blocks, model.blocks().size()) << "step " << step;
  }
  EXPECT_GT(model.interior_evictions(), 20u) << model.interior_evictions();
  // The partial rules did come up (of 240,000 lookups with a tail).
  EXPECT_GT(partial_matches, 10000u) << partial_matches;
  std::printf("partial matches: %zu\n", partial_matches);
}

}  // namespace
}  // namespace kvtier::coordinator
