// The main of a fuzz target outside a libFuzzer build (KVTIER_FUZZ off): runs the target's
// LLVMFuzzerTestOneInput over every file of the directories and files named, as libFuzzer
// replays a corpus, so that ctest exercises each target and its seeds in every tree (under
// AddressSanitizer and UBSan in the ASan tree). A target reports a broken property by
// aborting (tests/testing/fuzz_check.h), which fails the test.
//
// Each input is handed over in a buffer of exactly its size, so that a read past its end is
// a heap overflow the ASan tree reports.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

// The regular files named, and those directly inside the directories named, in a stable
// order; false (with the reason on stderr) when a name is neither.
bool CollectInputs(int argc, char** argv, std::vector<fs::path>& inputs) {
  for (int i = 1; i < argc; ++i) {
    const fs::path name(argv[i]);
    std::error_code error;
    if (fs::is_directory(name, error)) {
      for (const fs::directory_entry& entry : fs::directory_iterator(name, error)) {
        if (entry.is_regular_file()) inputs.push_back(entry.path());
      }
    } else if (fs::is_regular_file(name, error)) {
      inputs.push_back(name);
    } else {
      std::fprintf(stderr, "fuzz replay: %s is neither a file nor a directory\n", argv[i]);
      return false;
    }
    if (error) {
      std::fprintf(stderr, "fuzz replay: %s: %s\n", argv[i], error.message().c_str());
      return false;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  return true;
}

bool Replay(const fs::path& input) {
  std::ifstream in(input, std::ios::binary);
  std::error_code error;
  const uintmax_t size = fs::file_size(input, error);
  if (!in || error) {
    std::fprintf(stderr, "fuzz replay: %s cannot be read\n", input.c_str());
    return false;
  }
  // Exactly `size` bytes (not a vector's spare capacity), and never a null pointer.
  const std::unique_ptr<uint8_t[]> bytes(new uint8_t[std::max<uintmax_t>(size, 1)]);
  in.read(reinterpret_cast<char*>(bytes.get()), static_cast<std::streamsize>(size));
  if (static_cast<uintmax_t>(in.gcount()) != size) {
    std::fprintf(stderr, "fuzz replay: %s changed while it was read\n", input.c_str());
    return false;
  }
  LLVMFuzzerTestOneInput(bytes.get(), size);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  if (!CollectInputs(argc, argv, inputs)) return 2;
  if (inputs.empty()) {
    std::fprintf(stderr, "fuzz replay: no inputs: name the seed directory\n");
    return 2;
  }
  for (const fs::path& input : inputs) {
    if (!Replay(input)) return 2;
  }
  std::printf("fuzz replay: %zu inputs, every property held\n", inputs.size());
  return 0;
}
