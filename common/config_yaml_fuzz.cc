// Fuzz target: ApplyYaml over a configuration file's text (`kvtier up --config`), then the
// cross-field checks, as LoadConfig runs them. Beyond not crashing, nothing may escape as an
// exception (yaml-cpp throws; every throw must become a Status), and a refusal names what
// was wrong.
#include <cstdint>
#include <string_view>

#include "common/config.h"
#include "tests/testing/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvtier::KvtierConfig config;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kvtier::Status status = kvtier::ApplyYaml(text, "fuzz.yaml", config);
  if (status.ok()) status = kvtier::ValidateConfig(config);
  if (!status.ok()) kvtier::testing::FuzzCheck(!status.message().empty(), "a refusal says why");
  return 0;
}
