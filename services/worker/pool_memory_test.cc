#include "services/worker/pool_memory.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace kvtier::worker {
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
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child could not map or read the pool";
  EXPECT_STREQ(static_cast<const char*>(pool->data()) + (1 << 20) - 8, "written");
}

TEST(SharedPoolMemoryTest, NamesAreUnlinkedWithTheMemoryAndBadMapsFail) {
  std::string name;
  {
    auto pool = SharedPoolMemory::Create(4096);
    ASSERT_TRUE(pool.ok());
    name = pool->name();
    EXPECT_EQ(SharedPoolMemory::Map(name, 8192).status().code(), StatusCode::kFailedPrecondition) << "too small";
    EXPECT_TRUE(SharedPoolMemory::Map(name, 4096).ok());
  }
  EXPECT_EQ(SharedPoolMemory::Map(name, 4096).status().code(), StatusCode::kNotFound) << "unlinked with the pool";
  EXPECT_EQ(SharedPoolMemory::Map("../etc/passwd", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedPoolMemory::Create(0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::worker
