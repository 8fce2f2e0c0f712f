// CUDA IPC sharing of pool memory: the handle's forms on any machine; on a GPU, another
// process (gpu_ipc_peer, an inference process's stand-in) reads and writes the pool in place.
#include "gpu/shared_device_memory.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "gpu/device.h"
#include "gpu/kernels.h"

namespace kvtier::gpu {
namespace {

uint8_t PatternByte(size_t i, unsigned seed) { return static_cast<uint8_t>(i * 31 + seed); }

// Runs `command`; returns its exit code and its output in `out`.
int RunCommand(const std::string& command, std::string* out) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[512];
  out->clear();
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) *out += buffer;
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// gpu_ipc_peer beside this test (a bundle carried to a GPU machine), else in the build's bin/.
std::string PeerPath() {
  const auto beside =
      std::filesystem::read_symlink("/proc/self/exe").parent_path() / "gpu_ipc_peer";
  return std::filesystem::exists(beside) ? beside.string()
                                         : std::string(KVTIER_BIN_DIR "/gpu_ipc_peer");
}

TEST(IpcHandleTest, HexAndBytesRoundTripAndBadInputIsNamed) {
  IpcHandle handle;
  for (size_t i = 0; i < IpcHandle::kBytes; ++i) handle.bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  const std::string hex = handle.ToHex();
  ASSERT_EQ(hex.size(), 128u);
  auto back = IpcHandle::FromHex(hex);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->bytes, handle.bytes);
  auto raw =
      IpcHandle::FromBytes(std::string(reinterpret_cast<const char*>(handle.bytes.data()), 64));
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->bytes, handle.bytes);

  EXPECT_NE(
      IpcHandle::FromHex(hex.substr(1)).status().message().find("expected 128 hex digits, got 127"),
      std::string::npos);
  std::string bad = hex;
  bad[9] = 'g';
  EXPECT_NE(IpcHandle::FromHex(bad).status().message().find("position 9"), std::string::npos);
  EXPECT_EQ(IpcHandle::FromBytes("short").status().code(), StatusCode::kInvalidArgument);
}

TEST(SharedDeviceMemoryTest, WithoutAGpuCreateSaysUnavailable) {
  if (ProbeDevices().has_gpu()) GTEST_SKIP() << "a GPU is present: see the sharing test";
  EXPECT_EQ(SharedDeviceMemory::Create(0, 1 << 20).status().code(), StatusCode::kUnavailable);
}

TEST(SharedDeviceMemoryTest, AnotherProcessReadsAndWritesThePoolInPlace) {
  const DeviceProbe probe = ProbeDevices();
  if (!probe.has_gpu()) GTEST_SKIP() << "no GPU: " << probe.cpu_reason;
  constexpr size_t kBytes = 4 << 20;
  auto memory = SharedDeviceMemory::Create(0, kBytes);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_TRUE(memory->owner());
  auto backend = MakeCudaBackend(0);
  ASSERT_TRUE(backend.ok()) << backend.status();

  // Created zero-filled; the worker writes pattern 7.
  std::vector<uint8_t> host(kBytes, 0xFF);
  ASSERT_TRUE((*backend)->Copy(host.data(), memory->data(), kBytes).ok());
  EXPECT_EQ(host, std::vector<uint8_t>(kBytes, 0));
  for (size_t i = 0; i < kBytes; ++i) host[i] = PatternByte(i, 7);
  ASSERT_TRUE((*backend)->Copy(memory->data(), host.data(), kBytes).ok());

  // The peer process checks pattern 7 through its own mapping and writes pattern 99.
  std::string out;
  const std::string peer = PeerPath();
  ASSERT_EQ(
      RunCommand(peer + " " + memory->handle().ToHex() + " " + std::to_string(kBytes) + " 7 99",
                 &out),
      0)
      << out;
  EXPECT_EQ(out, "ok\n");
  ASSERT_TRUE((*backend)->Copy(host.data(), memory->data(), kBytes).ok());
  size_t wrong = 0;
  for (size_t i = 0; i < kBytes; ++i) wrong += host[i] != PatternByte(i, 99) ? 1 : 0;
  EXPECT_EQ(wrong, 0u) << "the peer's writes are visible to the creator, in place";

  // A peer that expects another pattern says which byte differs.
  EXPECT_EQ(
      RunCommand(peer + " " + memory->handle().ToHex() + " " + std::to_string(kBytes) + " 8 1",
                 &out),
      1);
  EXPECT_NE(out.find("byte 0 differs"), std::string::npos) << out;
  // CUDA refuses to open a handle in the process that made it.
  const Status same_process = SharedDeviceMemory::Open(0, memory->handle(), kBytes).status();
  EXPECT_EQ(same_process.code(), StatusCode::kFailedPrecondition) << same_process;
}

}  // namespace
}  // namespace kvtier::gpu
