// HostTier::Pin: a block read where it lies, for a sender that gathers straight from the
// tier's pages.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "storage/host_tier.h"
#include "storage/testing/blocks.h"
#include "storage/testing/host_tiers.h"

namespace kvtier::storage {
namespace {

using testing::MakeBlock;
using testing::TestBlock;

using testing::SmallHostTier;

constexpr uint32_t kPage = testing::kTestPageBytes;

std::unique_ptr<HostTier> MakeTier(uint64_t pages) {
  return HostTier::Create(SmallHostTier(pages)).value();
}

std::vector<std::span<const uint8_t>> Pieces(const PinnedBlock& pin) {
  std::vector<std::span<const uint8_t>> pieces;
  pin.ForEachPiece([&](std::span<const uint8_t> piece) { pieces.push_back(piece); });
  return pieces;
}

std::vector<uint8_t> Bytes(const PinnedBlock& pin) {
  std::vector<uint8_t> bytes;
  for (std::span<const uint8_t> piece : Pieces(pin))
    bytes.insert(bytes.end(), piece.begin(), piece.end());
  return bytes;
}

// Block 1 (three pages and 100 bytes) lands in fresh pages, in address order: one piece.
// Blocks 3 and 5 take a page each after it; block 3 goes. Block 2 then takes the page
// block 3 left and two fresh ones past block 5's: two pieces. Both read back whole, and
// each pin counts as a hit.
TEST(HostTierPinTest, APinnedBlockIsReadInPlaceInRunsOfAdjacentPages) {
  auto tier = MakeTier(16);
  const TestBlock one = MakeBlock(1, 3 * kPage + 100), three = MakeBlock(3, kPage),
                  five = MakeBlock(5, kPage);
  ASSERT_TRUE(tier->Put(one.header, one.payload).ok());
  ASSERT_TRUE(tier->Put(three.header, three.payload).ok());
  ASSERT_TRUE(tier->Put(five.header, five.payload).ok());
  ASSERT_TRUE(tier->Remove(three.ref()).ok());
  const TestBlock two = MakeBlock(2, 3 * kPage);
  ASSERT_TRUE(tier->Put(two.header, two.payload).ok());

  Result<PinnedBlock> pin_one = tier->Pin(one.ref());
  ASSERT_TRUE(pin_one.ok()) << pin_one.status();
  EXPECT_EQ(pin_one->header().key, one.header.key);
  EXPECT_EQ(pin_one->header().payload_bytes, one.payload.size());
  EXPECT_EQ(Pieces(*pin_one).size(), 1u);
  EXPECT_EQ(Bytes(*pin_one), one.payload);
  Result<PinnedBlock> pin_two = tier->Pin(two.ref());
  ASSERT_TRUE(pin_two.ok()) << pin_two.status();
  EXPECT_EQ(Pieces(*pin_two).size(), 2u);
  EXPECT_EQ(Bytes(*pin_two), two.payload);
  const TierStats stats = tier->Stats();
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.bytes_read, one.payload.size() + two.payload.size());
}

TEST(HostTierPinTest, AMissIsNotFoundAndCounted) {
  auto tier = MakeTier(4);
  const TestBlock absent = MakeBlock(9, kPage);
  EXPECT_EQ(tier->Pin(absent.ref()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(tier->Stats().misses, 1u);
}

// Block 1 (two pages of four) is pinned, then removed: the tier no longer has it, but its
// pages stay its own. Block 2 fills the other two pages; block 3 then evicts block 2, not
// the pinned pages. When the pin goes, block 1's pages are free: block 4 fits beside 3.
TEST(HostTierPinTest, APinKeepsTheBytesThroughRemoveAndEvictionAndFreesThePagesLast) {
  auto tier = MakeTier(4);
  const TestBlock one = MakeBlock(1, 2 * kPage), two = MakeBlock(2, 2 * kPage),
                  three = MakeBlock(3, 2 * kPage), four = MakeBlock(4, 2 * kPage);
  ASSERT_TRUE(tier->Put(one.header, one.payload).ok());
  {
    Result<PinnedBlock> pin = tier->Pin(one.ref());
    ASSERT_TRUE(pin.ok()) << pin.status();
    ASSERT_TRUE(tier->Remove(one.ref()).ok());
    EXPECT_FALSE(tier->Contains(one.ref()));
    ASSERT_TRUE(tier->Put(two.header, two.payload).ok());
    ASSERT_TRUE(tier->Put(three.header, three.payload).ok());
    EXPECT_FALSE(tier->Contains(two.ref())) << "block 2 was evicted: block 1's pages were not free";
    EXPECT_EQ(Bytes(*pin), one.payload);
  }
  ASSERT_TRUE(tier->Put(four.header, four.payload).ok());
  EXPECT_TRUE(tier->Contains(three.ref())) << "block 4 took block 1's freed pages";
  EXPECT_TRUE(tier->Contains(four.ref()));
  EXPECT_EQ(tier->Stats().evictions, 1u);
}

// Two one-page blocks of a two-page tier, both pinned and removed: no page is free, and
// nothing is left to evict. Moving one pin onto the other releases the pin it replaces;
// a moved-from pin releases nothing.
TEST(HostTierPinTest, AMovedPinReleasesOnlyWhatItReplaces) {
  auto tier = MakeTier(2);
  const TestBlock a = MakeBlock(1, kPage), b = MakeBlock(2, kPage), c = MakeBlock(3, kPage),
                  d = MakeBlock(4, kPage);
  ASSERT_TRUE(tier->Put(a.header, a.payload).ok());
  ASSERT_TRUE(tier->Put(b.header, b.payload).ok());
  PinnedBlock pin_a = tier->Pin(a.ref()).value();
  PinnedBlock pin_b = tier->Pin(b.ref()).value();
  ASSERT_TRUE(tier->Remove(a.ref()).ok());
  ASSERT_TRUE(tier->Remove(b.ref()).ok());
  EXPECT_EQ(tier->Put(c.header, c.payload).code(), StatusCode::kResourceExhausted);

  pin_a = std::move(pin_b);  // block 1's page is free now; block 2's is still held
  EXPECT_EQ(Bytes(pin_a), b.payload);
  EXPECT_TRUE(Pieces(pin_b).empty())
      << "a moved-from pin holds nothing";  // NOLINT(bugprone-use-after-move)
  ASSERT_TRUE(tier->Put(c.header, c.payload).ok());
  // Block 4 can only have block 3's page (evicting it), never the pinned one.
  ASSERT_TRUE(tier->Put(d.header, d.payload).ok());
  EXPECT_FALSE(tier->Contains(c.ref()));
  EXPECT_EQ(Bytes(pin_a), b.payload);
}

// With verify_on_get a pin checks the bytes in place first: a block corrupted in the slab
// is dropped and reported as data loss, and its pages are not left held.
TEST(HostTierPinTest, WithVerifyOnGetACorruptBlockIsDroppedNotPinned) {
  std::span<uint8_t> slab;
  std::vector<uint64_t> removed;
  HostTierOptions options = SmallHostTier(8);
  options.verify_on_get = true;
  options.pin = [&](void* data, size_t bytes) {
    slab = {static_cast<uint8_t*>(data), bytes};
    return Status::Ok();
  };
  options.on_removed = [&](const BlockHeader& header) { removed.push_back(header.key.lo); };
  auto tier = HostTier::Create(options).value();
  const TestBlock bad = MakeBlock(1, 3 * kPage), good = MakeBlock(2, 2 * kPage);
  ASSERT_TRUE(tier->Put(bad.header, bad.payload).ok());
  ASSERT_TRUE(tier->Put(good.header, good.payload).ok());
  const auto at =
      std::search(slab.begin(), slab.end(), bad.payload.begin(), bad.payload.begin() + 64);
  ASSERT_NE(at, slab.end()) << "block 1's first bytes are in the slab";
  *(at + 2 * kPage + 7) ^= 0x5A;  // in its third page

  const Result<PinnedBlock> pin = tier->Pin(bad.ref());
  EXPECT_EQ(pin.status().code(), StatusCode::kDataLoss) << pin.status();
  EXPECT_EQ(removed, std::vector<uint64_t>{1});
  const TierStats stats = tier->Stats();
  EXPECT_EQ(stats.checksum_failures, 1u);
  EXPECT_EQ(stats.bytes, 2u * kPage) << "the corrupt block's pages went back";
  EXPECT_EQ(Bytes(tier->Pin(good.ref()).value()), good.payload);
}

// A pipe holding a pin's pages by reference, as a zero-copy send leaves them in a socket:
// vmsplice without SPLICE_F_GIFT, the bytes read from the pages only when the pipe is read.
class SplicedPages {
 public:
  explicit SplicedPages(const PinnedBlock& pin) {
    EXPECT_EQ(pipe2(fds_, O_CLOEXEC), 0);
    for (std::span<const uint8_t> piece : Pieces(pin)) {
      iovec iov{const_cast<uint8_t*>(piece.data()), piece.size()};
      EXPECT_EQ(vmsplice(fds_[1], &iov, 1, 0), static_cast<ssize_t>(piece.size()));
      pieces_.push_back(piece);
      bytes_ += piece.size();
    }
  }
  ~SplicedPages() {
    close(fds_[0]);
    close(fds_[1]);
  }
  std::vector<uint8_t> Read() {
    std::vector<uint8_t> bytes(bytes_);
    EXPECT_EQ(read(fds_[0], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    return bytes;
  }
  // What the tier's pages that were spliced hold now, in the order spliced.
  std::vector<uint8_t> PagesNow() const {
    std::vector<uint8_t> bytes;
    for (std::span<const uint8_t> piece : pieces_)
      bytes.insert(bytes.end(), piece.begin(), piece.end());
    return bytes;
  }

 private:
  int fds_[2] = {-1, -1};
  std::vector<std::span<const uint8_t>> pieces_;
  size_t bytes_ = 0;
};

// Block 1 fills a two-page tier and is spliced, then unpinned lent and removed. Block 2
// takes its two pages: the tier replaces their memory first, so the spliced bytes read
// later are still block 1's, and block 2 reads back whole.
TEST(HostTierPinTest, ALentPageIsReplacedBeforeItIsWrittenAgain) {
  auto tier = MakeTier(2);
  ASSERT_TRUE(tier->can_lend_pages());
  const TestBlock one = MakeBlock(1, 2 * kPage), two = MakeBlock(2, 2 * kPage);
  ASSERT_TRUE(tier->Put(one.header, one.payload).ok());
  PinnedBlock pin = tier->Pin(one.ref()).value();
  SplicedPages spliced(pin);
  pin.UnpinLent();
  EXPECT_TRUE(Pieces(pin).empty()) << "an unpinned pin holds nothing";
  ASSERT_TRUE(tier->Remove(one.ref()).ok());
  ASSERT_TRUE(tier->Put(two.header, two.payload).ok());

  EXPECT_NE(spliced.PagesNow(), one.payload) << "block 2 was written where block 1 was";
  EXPECT_EQ(spliced.Read(), one.payload);
  EXPECT_EQ(Bytes(tier->Pin(two.ref()).value()), two.payload);
  EXPECT_EQ(tier->Stats().lent_pages_replaced, 2u);
}

// The hazard the above guards against: unpinned plainly (its reader said it read the
// bytes), the pages are written in place, and bytes still spliced would change with them.
TEST(HostTierPinTest, APlainUnpinLeavesThePagesToBeWrittenInPlace) {
  auto tier = MakeTier(2);
  const TestBlock one = MakeBlock(1, 2 * kPage), two = MakeBlock(2, 2 * kPage);
  ASSERT_TRUE(tier->Put(one.header, one.payload).ok());
  std::optional<SplicedPages> spliced;
  {
    PinnedBlock pin = tier->Pin(one.ref()).value();
    spliced.emplace(pin);
  }
  ASSERT_TRUE(tier->Remove(one.ref()).ok());
  ASSERT_TRUE(tier->Put(two.header, two.payload).ok());

  const std::vector<uint8_t> now = spliced->PagesNow();
  EXPECT_NE(now, one.payload) << "block 2 was written where block 1 was";
  EXPECT_EQ(spliced->Read(), now);
  EXPECT_EQ(tier->Stats().lent_pages_replaced, 0u);
}

// A slab pinned for DMA cannot have its memory replaced: its pages are not lent.
TEST(HostTierPinTest, APinnedSlabDoesNotLendItsPages) {
  HostTierOptions options = SmallHostTier(2);
  options.pin = [](void*, size_t) { return Status::Ok(); };
  EXPECT_FALSE(HostTier::Create(options).value()->can_lend_pages());
}

}  // namespace
}  // namespace kvtier::storage
