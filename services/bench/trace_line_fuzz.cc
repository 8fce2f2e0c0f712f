// Fuzz target: ParseMooncakeLine over one line of a trace file (`kvtier replay --trace`,
// `kvtier bench index`). Beyond not crashing or throwing, a line it accepts must name as many
// blocks as its prompt needs: one hash id per 512 tokens or part of them, counted in 64 bits
// (a length near 2^32 once wrapped to a handful of blocks in 32).
#include <cstdint>
#include <string>

#include "services/bench/trace.h"
#include "tests/testing/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  const kvtier::Result<kvtier::bench::TraceRequest> request =
      kvtier::bench::ParseMooncakeLine(line);
  if (!request.ok()) {
    kvtier::testing::FuzzCheck(!request.status().message().empty(), "a refusal says why");
    return 0;
  }
  const uint64_t blocks =
      (uint64_t{request->input_length} + kvtier::bench::kMooncakeTokensPerBlock - 1) /
      kvtier::bench::kMooncakeTokensPerBlock;
  kvtier::testing::FuzzCheck(request->hash_ids.size() == blocks,
                             "one hash id per block of the prompt");
  return 0;
}
