#include "common/scratch_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>

namespace kvtier {
namespace {

namespace fs = std::filesystem;

TEST(ScratchDirTest, IsFreshAndGoesWithEverythingInIt) {
  std::string path;
  {
    Result<ScratchDir> dir = ScratchDir::Create("kvtier-scratch-test");
    ASSERT_TRUE(dir.ok()) << dir.status();
    path = dir->path();
    EXPECT_TRUE(fs::is_directory(path));
    EXPECT_EQ(fs::path(path).filename().string().rfind("kvtier-scratch-test-", 0), 0u) << path;
    EXPECT_TRUE(fs::is_empty(path));
    fs::create_directory(path + "/nested");
    std::ofstream(path + "/nested/file") << "bytes";
    Result<ScratchDir> other = ScratchDir::Create("kvtier-scratch-test");
    ASSERT_TRUE(other.ok());
    EXPECT_NE(other->path(), path) << "each is its own";
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(ScratchDirTest, AMoveHandsTheDirectoryOver) {
  Result<ScratchDir> made = ScratchDir::Create("kvtier-scratch-test");
  ASSERT_TRUE(made.ok());
  const std::string path = made->path();
  std::optional<ScratchDir> kept;
  {
    ScratchDir moved = std::move(made).value();
    kept.emplace(std::move(moved));
  }
  EXPECT_TRUE(fs::is_directory(path)) << "a moved-from one removes nothing";
  Result<ScratchDir> next = ScratchDir::Create("kvtier-scratch-test");
  ASSERT_TRUE(next.ok());
  *kept = std::move(next).value();
  EXPECT_FALSE(fs::exists(path)) << "assigning over one removes what it held";
}

TEST(ScratchDirTest, AParentThatCannotHoldItIsNamed) {
  const Status status = ScratchDir::Create("x", "/nonexistent-kvtier-parent").status();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("/nonexistent-kvtier-parent"), std::string::npos) << status;
}

}  // namespace
}  // namespace kvtier
