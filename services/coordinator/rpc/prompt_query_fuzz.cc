// Fuzz target: the routing API's request body, as a hostile or broken gateway sends it.
// Beyond no crash and no sanitizer report: a body that parses is read back equal from its
// own JSON (PromptQueryJson), and the reader never accepts what it rejected a byte ago
// (an accepted body followed by garbage is refused).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "services/coordinator/rpc/prompt_query_json.h"
#include "tests/testing/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::coordinator;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kvtier::Result<PromptQuery> query = ParsePromptQuery(text);
  if (!query.ok()) return 0;
  kvtier::Result<PromptQuery> again = ParsePromptQuery(PromptQueryJson(*query));
  kvtier::testing::FuzzCheck(again.ok() && *again == *query, "the query's own JSON reads back");
  kvtier::testing::FuzzCheck(!ParsePromptQuery(std::string(text) + "x").ok(),
                             "text after the object is refused");
  return 0;
}
