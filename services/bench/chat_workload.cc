#include "services/bench/chat_workload.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <random>

namespace kvtier::bench {
namespace {

// Content of one block, before chaining: (source, index). Sources: system prompt s is
// 1 + s, document d is 1'000'000 + d, conversation c's own blocks are 2'000'000 + c, a
// one-off conversation's text 4'000'000 + c.
using Content = std::pair<uint64_t, uint64_t>;

class IdChain {
 public:
  // The id of a block with `content` after the prefix ending in `parent` (0: none).
  uint64_t Next(uint64_t parent, const Content& content) {
    auto [it, inserted] =
        ids_.try_emplace({parent, content.first, content.second}, ids_.size() + 1);
    return it->second;
  }

 private:
  std::map<std::tuple<uint64_t, uint64_t, uint64_t>, uint64_t> ids_;
};

// Zipf(s) over n items by inverse transform on the cumulative weights.
class Zipf {
 public:
  Zipf(uint32_t n, double s) {
    double sum = 0;
    for (uint32_t k = 1; k <= n; ++k) cumulative_.push_back(sum += 1.0 / std::pow(k, s));
    for (double& c : cumulative_) c /= sum;
  }
  uint32_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<uint32_t>(std::lower_bound(cumulative_.begin(), cumulative_.end(), u) -
                                 cumulative_.begin());
  }

 private:
  std::vector<double> cumulative_;
};

struct Conversation {
  std::vector<Content> blocks;  // the prompt so far
  uint32_t turns_left;
  uint32_t id;
};

}  // namespace

std::vector<TraceRequest> GenerateChatWorkload(const ChatWorkloadOptions& o) {
  std::mt19937_64 rng(o.seed);
  auto uniform = [&rng](uint32_t lo, uint32_t hi) {
    return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
  };
  const Zipf documents(std::max(o.documents, 1u), o.zipf_s);
  const double mean_turns = (1.0 + std::max(o.max_turns, 1u)) / 2;
  std::exponential_distribution<double> new_conversation_gap_s(o.requests_per_second / mean_turns);
  std::exponential_distribution<double> think_time_s(1.0 / 20);  // a user answers in ~20 s

  // Events in time order: (time in ms, conversation index).
  using Event = std::pair<double, uint32_t>;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  std::vector<Conversation> conversations;
  double t = 0;
  for (uint32_t c = 0; c < o.conversations; ++c) {
    t += new_conversation_gap_s(rng) * 1000;
    Conversation conv{{}, uniform(1, std::max(o.max_turns, 1u)), c};
    const uint32_t system = uniform(0, std::max(o.system_prompts, 1u) - 1);
    for (uint32_t b = 0, n = 2 + system % 3; b < n; ++b) conv.blocks.push_back({1 + system, b});
    // Drawn only when asked for, so that the default workload stays what it was.
    if (o.one_off_share > 0 &&
        std::uniform_real_distribution<double>(0, 1)(rng) < o.one_off_share) {
      conv.turns_left = 1;
      for (uint32_t b = 0; b < o.one_off_blocks; ++b) conv.blocks.push_back({4'000'000 + c, b});
    } else if (std::uniform_real_distribution<double>(0, 1)(rng) < o.document_share) {
      const uint32_t doc = documents(rng);
      for (uint32_t b = 0, n = 2 + (doc * 7919u) % 11; b < n; ++b)
        conv.blocks.push_back({1'000'000 + doc, b});
    }
    conversations.push_back(std::move(conv));
    events.push({t, c});
  }

  IdChain chain;
  std::vector<TraceRequest> requests;
  while (!events.empty()) {
    const auto [at, c] = events.top();
    events.pop();
    Conversation& conv = conversations[c];
    // The user's message (and, after the first turn, the previous answer) joins the prompt.
    for (uint32_t b = 0, n = uniform(1, std::max(o.max_turn_blocks, 1u)); b < n; ++b) {
      conv.blocks.push_back({2'000'000 + conv.id, conv.blocks.size()});
    }
    TraceRequest request;
    request.timestamp_ms = static_cast<uint64_t>(at);
    // The prompt's last block is partial: its content is not the full block that the next
    // turn's prompt holds at that position, so it is never matched by it.
    uint64_t parent = 0;
    for (size_t b = 0; b < conv.blocks.size(); ++b) {
      const bool last = b + 1 == conv.blocks.size();
      const Content content = last ? Content{3'000'000 + conv.id, conv.turns_left} : conv.blocks[b];
      request.hash_ids.push_back(parent = chain.Next(parent, content));
    }
    request.input_length =
        static_cast<uint32_t>(conv.blocks.size()) * kMooncakeTokensPerBlock - uniform(0, 255);
    request.output_length = uniform(64, 512);
    requests.push_back(std::move(request));
    if (--conv.turns_left > 0) events.push({at + think_time_s(rng) * 1000, c});
  }
  return requests;
}

}  // namespace kvtier::bench
