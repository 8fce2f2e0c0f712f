// FuzzCheck: how a fuzz target (LLVMFuzzerTestOneInput) reports a property that failed.
//
// It prints what failed and aborts: libFuzzer saves the input that did it as a crash
// artifact, and the seed replay of ctest (tests/testing/fuzz_replay_main.cc) fails. A
// target returns normally for every input that its code refused with an error: refusing
// malformed input is the behaviour under test, not a finding.
//
// Thread safety: call it from the fuzz target's thread.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace kvtier::testing {

inline void FuzzCheck(bool holds, const char* property) {
  if (holds) return;
  std::fprintf(stderr, "fuzz property failed: %s\n", property);
  std::abort();
}

}  // namespace kvtier::testing
