#include "common/shared_pool_memory.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace kvtier {
namespace {

TEST(SharedPoolMemoryTest, AnotherProcessSeesAndWritesTheSameBytes) {
  auto pool = SharedPoolMemory::Create(1 << 20);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(pool->name().rfind("/kvtier-pool-", 0), 0u);
  std::memcpy(pool->data(), "block zero", 11);
  // A child process maps the pool by name, as an inference process would, reads what the
  // worker wrote and writes into the last block.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto mapped = SharedPoolMemory::Map(pool->name(), 1 << 20);
    if (!mapped.ok() || std::memcmp(mapped->data(), "block zero", 11) != 0) _exit(1);
    std::memcpy(static_cast<char*>(mapped->data()) + (1 << 20) - 8, "written", 8);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child could not map or read the pool";
  EXPECT_STREQ(static_cast<const char*>(pool->data()) + (1 << 20) - 8, "written");
}

TEST(SharedPoolMemoryTest, NamesAreUnlinkedWithTheMemoryAndBadMapsFail) {
  std::string name;
  {
    auto pool = SharedPoolMemory::Create(4096);
    ASSERT_TRUE(pool.ok());
    name = pool->name();
    EXPECT_EQ(SharedPoolMemory::Map(name, 8192).status().code(), StatusCode::kFailedPrecondition)
        << "too small";
    EXPECT_TRUE(SharedPoolMemory::Map(name, 4096).ok());
  }
  EXPECT_EQ(SharedPoolMemory::Map(name, 4096).status().code(), StatusCode::kNotFound)
      << "unlinked with the pool";
  EXPECT_EQ(SharedPoolMemory::Map("../etc/passwd", 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedPoolMemory::Create(0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

bool ShmExists(const std::string& name) { return ::access(("/dev/shm" + name).c_str(), F_OK) == 0; }

// A child creates a pool and dies without unlinking it, as a worker killed with SIGKILL
// does; the sweep removes that pool and leaves the live one of this process alone.
TEST(SharedPoolMemoryTest, RemoveStaleUnlinksThePoolsOfDeadCreatorsOnly) {
  auto live = SharedPoolMemory::Create(4096);
  ASSERT_TRUE(live.ok()) << live.status();
  int names[2];
  ASSERT_EQ(pipe(names), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto pool = SharedPoolMemory::Create(1 << 20);
    if (!pool.ok()) _exit(1);
    const std::string& name = pool->name();
    if (write(names[1], name.data(), name.size()) != static_cast<ssize_t>(name.size())) _exit(2);
    _exit(0);  // no destructor: the name stays behind
  }
  close(names[1]);
  char buffer[128] = {};
  ASSERT_GT(read(names[0], buffer, sizeof(buffer) - 1), 0);
  close(names[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string stale = buffer;
  ASSERT_TRUE(ShmExists(stale)) << "the dead child's pool was left behind";

  EXPECT_EQ(SharedPoolMemory::RemoveStale("/dev/shm", std::chrono::seconds(60)).pools, 0u)
      << "a pool changed within min_age is left (it may not be locked yet)";
  // Old enough (a whole second; ctime has seconds) that no pool another test process is
  // creating right now, not yet locked, could be taken for a dead one.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  // Another test's process starting meanwhile (a `kvtier up`, under ctest -j) removes stale
  // pools too: then this call finds nothing left to count, and the name is gone all the same.
  const bool left_to_us = ShmExists(stale);
  const SharedPoolMemory::Removed removed =
      SharedPoolMemory::RemoveStale("/dev/shm", std::chrono::seconds(1));
  if (left_to_us) {
    EXPECT_GE(removed.pools, 1u);
    EXPECT_GE(removed.bytes, uint64_t{1} << 20);
  }
  EXPECT_FALSE(ShmExists(stale));
  EXPECT_TRUE(ShmExists(live->name())) << "the live creator's pool stays";
  EXPECT_TRUE(SharedPoolMemory::Map(live->name(), 4096).ok());
}

}  // namespace
}  // namespace kvtier
