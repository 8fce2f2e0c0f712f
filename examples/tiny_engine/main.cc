// tiny_engine_demo: the example engine against a running kvtier (a pool of the tiny
// model's layout), e.g.
//   kvtier up --worker-num-layers 2 --worker-num-kv-heads 2 --worker-head-dim 8
//             --worker-tokens-per-block 4 --worker-dtype fp32 &   (one line)
//   tiny_engine_demo --connect 127.0.0.1:7400 --token-file kvtier-data/token
// Runs a conversation of growing prompts and prints, per turn, the tokens the cache saved
// and whether the output equals recomputation without a cache.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "examples/tiny_engine/tiny_engine.h"
#include "services/auth/token_store.h"

int main(int argc, char** argv) {
  using namespace kvtier;
  CLI::App app{"A tiny transformer that prefills and decodes through kvtier."};
  std::string address = "127.0.0.1:7400", token, token_file, act_for;
  uint32_t turns = 4;
  uint32_t prefill_chunk = examples::TinyEngineOptions{}.prefill_chunk_tokens;
  app.add_option("--connect", address, "kvtier node (host:port)")->capture_default_str();
  app.add_option("--token", token, "An engine's token (or kvtier up's generated one)")
      ->envname("KVTIER_TOKEN");
  app.add_option("--act-for", act_for,
                 "The tenant an engine token acts for (a token file's engines: section)");
  app.add_option("--token-file", token_file, "File whose first line is the token");
  app.add_option("--turns", turns, "Conversation turns")->capture_default_str();
  app.add_option("--prefill-chunk", prefill_chunk, "Prompt tokens prefilled at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (token.empty() && !token_file.empty()) {
    Result<std::string> read = auth::ReadTokenFile(token_file);
    if (!read.ok()) {
      std::fprintf(stderr, "--token-file: %s\n", read.status().message().c_str());
      return 2;
    }
    token = *read;
  }
  auto client = client::Client::Connect({.address = address, .token = token, .act_for = act_for});
  if (!client.ok()) {
    std::fprintf(stderr, "connect %s: %s\n", address.c_str(), client.status().ToString().c_str());
    return 1;
  }
  const examples::TinyModel model({}, /*seed=*/42);
  auto engine = examples::TinyEngine::Create(
      {.client = client->get(), .model = &model, .prefill_chunk_tokens = prefill_chunk});
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  std::vector<uint32_t> conversation;
  for (uint32_t turn = 0; turn < turns; ++turn) {
    for (uint32_t i = 0; i < 10; ++i)
      conversation.push_back((turn * 10 + i) * 7 % 64);  // the user's message
    auto out = (*engine)->Generate(turn + 1, conversation, 5);
    if (!out.ok()) {
      std::fprintf(stderr, "turn %u: %s\n", turn + 1, out.status().ToString().c_str());
      return 1;
    }
    const std::vector<examples::Vec> reference = model.Recompute(conversation);
    const bool same =
        model.NextToken(reference.back()) == (out->tokens.empty() ? 0 : out->tokens[0]);
    std::printf(
        "turn %u: %zu prompt tokens, %u from the cache, %u computed (%u prefill chunk%s); first "
        "token %s recomputation\n",
        turn + 1, conversation.size(), out->cached_tokens, out->computed_tokens,
        out->prefill_chunks, out->prefill_chunks == 1 ? "" : "s", same ? "equals" : "DIFFERS FROM");
    conversation.insert(conversation.end(), out->tokens.begin(), out->tokens.end());  // the answer
  }
  return 0;
}
