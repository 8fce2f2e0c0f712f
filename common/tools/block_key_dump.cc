// Prints the block keys of a token list, one hex key per line: a debugging aid for engine
// integrations, and the second process of the block-key determinism test.
//
//   kvtier_block_key_dump SALT TOKENS_PER_BLOCK TOKEN...
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/block_key.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SALT TOKENS_PER_BLOCK TOKEN...\n", argv[0]);
    return 2;
  }
  const long per_block = std::strtol(argv[2], nullptr, 10);
  if (per_block <= 0) {
    std::fprintf(stderr, "TOKENS_PER_BLOCK must be a positive integer, got \"%s\"\n", argv[2]);
    return 2;
  }
  std::vector<uint32_t> tokens;
  for (int i = 3; i < argc; ++i)
    tokens.push_back(static_cast<uint32_t>(std::strtoul(argv[i], nullptr, 10)));
  for (const kvtier::BlockKey& key :
       kvtier::ComputeBlockKeys(argv[1], tokens, static_cast<uint32_t>(per_block))) {
    std::printf("%s\n", key.ToHex().c_str());
  }
  return 0;
}
