// gpu_ipc_peer: the other process of the CUDA IPC test (gpu/shared_device_memory_test.cc),
// standing in for an inference process: it opens a pool by its handle, checks the bytes
// the worker wrote, and writes its own in place.
//
//   gpu_ipc_peer HANDLE_HEX BYTES EXPECT_SEED WRITE_SEED
//
// Byte i of a pattern with seed s is (i * 31 + s) mod 256. Exit 0 and "ok" when the
// expected pattern was there and the new one is written; 1 on a failure (named); 2 on bad
// usage.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu/kernels.h"
#include "gpu/shared_device_memory.h"

namespace {

uint8_t PatternByte(size_t i, unsigned seed) { return static_cast<uint8_t>(i * 31 + seed); }

int Fail(const std::string& message) {
  std::fprintf(stderr, "gpu_ipc_peer: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kvtier::gpu;
  if (argc != 5) {
    std::fprintf(stderr, "usage: gpu_ipc_peer HANDLE_HEX BYTES EXPECT_SEED WRITE_SEED\n");
    return 2;
  }
  auto handle = IpcHandle::FromHex(argv[1]);
  if (!handle.ok()) return Fail(handle.status().ToString());
  const size_t bytes = std::strtoull(argv[2], nullptr, 10);
  const auto expect_seed = static_cast<unsigned>(std::atoi(argv[3]));
  const auto write_seed = static_cast<unsigned>(std::atoi(argv[4]));
  auto memory = SharedDeviceMemory::Open(0, *handle, bytes);
  if (!memory.ok()) return Fail(memory.status().ToString());
  auto backend = MakeCudaBackend(0);
  if (!backend.ok()) return Fail(backend.status().ToString());
  std::vector<uint8_t> host(bytes);
  if (auto s = (*backend)->Copy(host.data(), memory->data(), bytes); !s.ok())
    return Fail(s.ToString());
  for (size_t i = 0; i < bytes; ++i) {
    if (host[i] != PatternByte(i, expect_seed))
      return Fail("byte " + std::to_string(i) + " differs from the creator's");
  }
  for (size_t i = 0; i < bytes; ++i) host[i] = PatternByte(i, write_seed);
  if (auto s = (*backend)->Copy(memory->data(), host.data(), bytes); !s.ok())
    return Fail(s.ToString());
  std::printf("ok\n");
  return 0;
}
