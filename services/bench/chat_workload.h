// The built-in workload of `kvtier replay` (and so of `make run`): multi-turn chat,
// generated in the Mooncake trace format so that it replays exactly as a real trace does.
//
// What makes chat traffic cacheable is modelled, and nothing else:
//   - every conversation starts with one of a few system prompts (shared by all users),
//   - about half attach a document drawn from a Zipf-popular library (RAG, uploads),
//   - each conversation then grows turn by turn: turn t's prompt is turn t-1's prompt
//     plus the answer and the next user message, so its first blocks repeat.
// With one_off_share, that share of conversations is instead a single request carrying
// a long text of its own after its system prompt (a batch job summarizing documents no
// one sends again): blocks seen once, the traffic a lower tier's admission filter is
// for.
// Conversations overlap in time (a user answers after a think time while others talk).
// Block ids are prefix-chained like Mooncake's: two requests share their first k ids
// exactly when their first k blocks of content are equal.
//
// Thread safety: a pure function of its options.
#pragma once

#include <cstdint>
#include <vector>

#include "services/bench/trace.h"

namespace kvtier::bench {

struct ChatWorkloadOptions {
  uint32_t conversations = 600;
  uint32_t max_turns = 8;       // turns per conversation: uniform in [1, max_turns]
  uint32_t system_prompts = 6;  // each 2-4 blocks
  uint32_t documents = 300;     // each 2-12 blocks, popularity Zipf(zipf_s)
  double zipf_s = 1.1;
  double document_share = 0.5;      // conversations that attach a document
  uint32_t max_turn_blocks = 2;     // answer + next message: 1..max_turn_blocks blocks per turn
  double requests_per_second = 20;  // arrival rate of new conversations, times mean turns
  double one_off_share = 0;         // conversations that are one request of unique blocks
  uint32_t one_off_blocks = 16;     // those blocks, after the system prompt
  uint64_t seed = 1;
};

// Requests in arrival order.
[[nodiscard]] std::vector<TraceRequest> GenerateChatWorkload(const ChatWorkloadOptions& options);

}  // namespace kvtier::bench
