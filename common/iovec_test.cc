#include "common/iovec.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier {
namespace {

TEST(ConsumeIovecsTest, SkipsWhatMovedAcrossBuffers) {
  char a[10], c[5], d[7];
  std::vector<iovec> iov{{a, sizeof(a)}, {nullptr, 0}, {c, sizeof(c)}, {d, sizeof(d)}};
  // 12 bytes moved: all of a, the empty b, 2 of c.
  size_t first = ConsumeIovecs(iov, 0, 12);
  ASSERT_EQ(first, 2u);
  EXPECT_EQ(iov[2].iov_base, c + 2);
  EXPECT_EQ(iov[2].iov_len, 3u);
  // The rest of c exactly: the next buffer with bytes left is d, untouched.
  first = ConsumeIovecs(iov, first, 3);
  ASSERT_EQ(first, 3u);
  EXPECT_EQ(iov[3].iov_base, d);
  EXPECT_EQ(iov[3].iov_len, sizeof(d));
  EXPECT_EQ(ConsumeIovecs(iov, first, sizeof(d)), iov.size());
}

TEST(ConsumeIovecsTest, NothingMovedLeavesEverythingButSkipsEmptyBuffers) {
  char a[4];
  std::vector<iovec> iov{{nullptr, 0}, {a, sizeof(a)}};
  EXPECT_EQ(ConsumeIovecs(iov, 0, 0), 1u);
  EXPECT_EQ(iov[1].iov_len, sizeof(a));
}

}  // namespace
}  // namespace kvtier
