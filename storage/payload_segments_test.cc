#include "storage/payload_segments.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <numeric>

#include "storage/block_header.h"
#include "tests/testing/test_util.h"

namespace kvtier::storage {
namespace {

using kvtier::testing::TempDir;

constexpr uint64_t kSegmentBytes = 1 << 20;

std::vector<uint8_t> Payload(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(seed * 31 + i * 7);
  return out;
}

std::unique_ptr<PayloadSegments> OpenSegments(const std::string& dir) {
  auto segments = PayloadSegments::Open({.dir = dir, .segment_bytes = kSegmentBytes});
  EXPECT_TRUE(segments.ok()) << segments.status();
  return segments.ok() ? std::move(segments).value() : nullptr;
}

std::vector<uint64_t> AppendAll(PayloadSegments& segments,
                                const std::vector<std::vector<uint8_t>>& payloads) {
  // As the disk tier writes: room reserved, the payloads written into it in one go.
  std::vector<std::span<const uint8_t>> spans(payloads.begin(), payloads.end());
  std::vector<uint64_t> sizes;
  for (const auto& payload : payloads) sizes.push_back(payload.size());
  auto reservation = segments.Reserve(sizes);
  EXPECT_TRUE(reservation.ok()) << reservation.status();
  if (!reservation.ok()) return {};
  const Status written = reservation->file->WriteAt(reservation->offset, spans);
  EXPECT_TRUE(written.ok()) << written;
  return reservation->locations;
}

// Reads a payload back through its segment file, checking bytes and hash.
void ExpectStored(const PayloadSegments& segments, uint64_t location,
                  const std::vector<uint8_t>& payload) {
  auto file = segments.File(SegmentOf(location));
  ASSERT_NE(file, nullptr) << "segment " << SegmentOf(location);
  std::vector<uint8_t> out(payload.size());
  auto hash = file->ReadHashed(OffsetOf(location), out);
  ASSERT_TRUE(hash.ok()) << hash.status();
  EXPECT_EQ(*hash, PayloadChecksum(payload));
  EXPECT_EQ(out, payload);
}

TEST(PayloadSegmentsTest, AppendsInOneSegmentAndReadsBackWithTheirHash) {
  TempDir dir;
  auto segments = OpenSegments(dir.path());
  // Three payloads, one of them larger than a read chunk (256 KiB).
  const std::vector<std::vector<uint8_t>> payloads{Payload(1000, 1), Payload(300'000, 2),
                                                   Payload(8, 3)};
  const std::vector<uint64_t> locations = AppendAll(*segments, payloads);
  ASSERT_EQ(locations.size(), 3u);
  EXPECT_EQ(SegmentOf(locations[0]), SegmentOf(locations[2]));
  EXPECT_EQ(OffsetOf(locations[1]), 1000u);
  EXPECT_EQ(OffsetOf(locations[2]), 301'000u);
  for (size_t i = 0; i < payloads.size(); ++i) ExpectStored(*segments, locations[i], payloads[i]);
  EXPECT_EQ(segments->live_bytes(), 301'008u);
  EXPECT_EQ(segments->file_bytes(), 301'008u);
  EXPECT_TRUE(segments->Sync().ok());
}

TEST(PayloadSegmentsTest, AFullSegmentIsSealedAndDeletedOnceNothingInItLives) {
  TempDir dir;
  auto segments = OpenSegments(dir.path());
  // Two payloads of 600 KiB: the second does not fit the first's segment (1 MiB).
  const std::vector<uint8_t> first = Payload(600 << 10, 1), second = Payload(600 << 10, 2);
  const uint64_t a = AppendAll(*segments, {first}).at(0);
  const uint64_t b = AppendAll(*segments, {second}).at(0);
  ASSERT_NE(SegmentOf(a), SegmentOf(b));
  EXPECT_EQ(segments->segments(), 2u);
  const std::shared_ptr<const SegmentFile> held = segments->File(SegmentOf(a));
  const std::string path = held->path();

  segments->Release(a, first.size());  // the sealed segment holds nothing now
  EXPECT_EQ(segments->File(SegmentOf(a)), nullptr);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(segments->segments(), 1u);
  std::vector<uint8_t> out(first.size());
  auto hash = held->ReadHashed(OffsetOf(a), out);  // a reader that had it keeps reading
  ASSERT_TRUE(hash.ok()) << hash.status();
  EXPECT_EQ(out, first);

  segments->Release(b, second.size());  // the active segment stays, empty
  EXPECT_NE(segments->File(SegmentOf(b)), nullptr);
}

TEST(PayloadSegmentsTest, ReopenCountsWhatHeadersReferenceAndDropsTheRest) {
  TempDir dir;
  std::vector<uint64_t> locations;
  const std::vector<std::vector<uint8_t>> payloads{Payload(700 << 10, 1), Payload(700 << 10, 2),
                                                   Payload(700 << 10, 3)};
  {
    auto segments = OpenSegments(dir.path());
    for (const auto& payload : payloads) locations.push_back(AppendAll(*segments, {payload}).at(0));
    ASSERT_EQ(segments->segments(), 3u);
  }
  auto segments = OpenSegments(dir.path());
  EXPECT_EQ(segments->segments(), 3u);
  // Payloads 0 and 2 are referenced; 1 was never acknowledged. A location past a file's end
  // (a file cut short) is refused.
  EXPECT_TRUE(segments->AddLive(locations[0], payloads[0].size()));
  EXPECT_TRUE(segments->AddLive(locations[2], payloads[2].size()));
  EXPECT_FALSE(
      segments->AddLive(MakeSegmentLocation(SegmentOf(locations[2]), 600 << 10), 200 << 10));
  EXPECT_FALSE(segments->AddLive(MakeSegmentLocation(99, 0), 1));
  segments->DropUnreferenced();
  EXPECT_EQ(segments->segments(), 2u);
  EXPECT_EQ(segments->File(SegmentOf(locations[1])), nullptr);
  ExpectStored(*segments, locations[0], payloads[0]);
  ExpectStored(*segments, locations[2], payloads[2]);
  // New appends go to a new segment, never into an old file.
  const uint64_t fresh = AppendAll(*segments, {Payload(10, 4)}).at(0);
  EXPECT_GT(SegmentOf(fresh), SegmentOf(locations[2]));
}

TEST(PayloadSegmentsTest, TheSparsestSealedSegmentBelowTheShareIsTheOneToCompact) {
  TempDir dir;
  auto segments = OpenSegments(dir.path());
  // Segments of two 400 KiB payloads each: 1 and 2 sealed, 3 active.
  std::vector<uint64_t> at;
  for (uint8_t i = 0; i < 5; ++i) at.push_back(AppendAll(*segments, {Payload(400 << 10, i)}).at(0));
  ASSERT_EQ(segments->segments(), 3u);
  EXPECT_EQ(segments->SparsestSealed(0.5), std::nullopt) << "both sealed segments are full";
  segments->Release(at[0], 400 << 10);  // segment 1: half live
  EXPECT_EQ(segments->SparsestSealed(0.5), std::nullopt) << "half is not below half";
  EXPECT_EQ(segments->SparsestSealed(0.6), SegmentOf(at[0]));
  segments->Release(at[4], 400 << 10);  // the active segment is never a candidate
  EXPECT_EQ(segments->SparsestSealed(0.6), SegmentOf(at[0]));
}

TEST(PayloadSegmentsTest, AbandonedRoomIsReusedWhenLastAndDeadOtherwise) {
  TempDir dir;
  auto segments = OpenSegments(dir.path());
  const std::vector<uint64_t> sizes{1000, 2000};
  auto first = segments->Reserve(sizes);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->new_segment);
  EXPECT_EQ(first->bytes, 3000u);
  EXPECT_EQ(OffsetOf(first->locations[1]), 1000u);
  auto second = segments->Reserve(sizes);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->new_segment);
  EXPECT_EQ(second->offset, 3000u);
  EXPECT_EQ(segments->live_bytes(), 6000u);
  // The first write failed: its room stays behind the second's as dead bytes.
  segments->Abandon(*first);
  EXPECT_EQ(segments->live_bytes(), 3000u);
  EXPECT_EQ(segments->file_bytes(), 6000u);
  // The second failed too: it was last, so the segment's end moves back over it.
  segments->Abandon(*second);
  EXPECT_EQ(segments->live_bytes(), 0u);
  EXPECT_EQ(segments->file_bytes(), 3000u);
  const std::vector<uint8_t> payload = Payload(500, 9);
  const uint64_t at = AppendAll(*segments, {payload}).at(0);
  EXPECT_EQ(OffsetOf(at), 3000u) << "written where the second reservation was";
  ExpectStored(*segments, at, payload);
}

TEST(PayloadSegmentsTest, ReadingPastTheEndOfAFileIsAnErrorNamingIt) {
  TempDir dir;
  auto segments = OpenSegments(dir.path());
  const uint64_t location = AppendAll(*segments, {Payload(4096, 1)}).at(0);
  auto file = segments->File(SegmentOf(location));
  ASSERT_EQ(ftruncate(file->fd(), 100), 0);  // the disk lost the file's tail
  std::vector<uint8_t> out(4096);
  auto hash = file->ReadHashed(OffsetOf(location), out);
  ASSERT_FALSE(hash.ok());
  EXPECT_EQ(hash.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(hash.status().message().find(file->path()), std::string::npos) << hash.status();
}

}  // namespace
}  // namespace kvtier::storage
