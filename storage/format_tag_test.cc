#include "storage/format_tag.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace kvtier::storage {
namespace {

TEST(FormatTagTest, EqualBytesAreOneInternedCopy) {
  const std::string bytes = "llama3-8b|L32/H8/D128/T16/bf16/W0/S0|none";
  const FormatTag a = bytes;
  const FormatTag b = std::string_view(bytes);
  const FormatTag copy = a;
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.data(), b.data()) << "one copy of the bytes";
  EXPECT_EQ(copy.data(), a.data());
  EXPECT_EQ(a, bytes);
  EXPECT_EQ(a, "llama3-8b|L32/H8/D128/T16/bf16/W0/S0|none");
  EXPECT_EQ(std::string_view(a), bytes);
  EXPECT_EQ(a.str(), bytes);
  EXPECT_EQ(a.size(), bytes.size());
  EXPECT_FALSE(a == FormatTag("llama3-8b|L32/H8/D128/T16/bf16/W0/S0|int8"));
  EXPECT_EQ("tag " + a, "tag " + bytes);
}

TEST(FormatTagTest, TheEmptyTagIsTheDefault) {
  const FormatTag empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty, "");
  EXPECT_EQ(empty, FormatTag(""));
  EXPECT_EQ(FormatTag::Intern("").value(), empty);
}

TEST(FormatTagTest, InternAgreesWithTheConstructors) {
  const FormatTag made = "model-a|L2/H2/D64/T16/fp16/W0/S0|none";
  const Result<FormatTag> interned = FormatTag::Intern("model-a|L2/H2/D64/T16/fp16/W0/S0|none");
  ASSERT_TRUE(interned.ok()) << interned.status();
  EXPECT_EQ(interned->data(), made.data());
  // A tag no header may carry is refused before it is interned.
  const Result<FormatTag> too_long = FormatTag::Intern(std::string(kMaxFormatTagBytes + 1, 'x'));
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument) << too_long.status();
  EXPECT_TRUE(FormatTag::Intern(std::string(kMaxFormatTagBytes, 'x')).ok());
}

// Threads interning the same tags at once each get the one copy.
TEST(FormatTagTest, ThreadsInternTheSameCopy) {
  const std::string bytes = "model-b|L4/H2/D64/T16/fp16/W0/S0|none";
  std::vector<const char*> seen(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < seen.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        const FormatTag other = "model-c-" + std::to_string(i % 3);  // another tag between
        EXPECT_NE(other.data(), nullptr);
        seen[t] = FormatTag::Intern(bytes).value().data();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const char* data : seen) EXPECT_EQ(data, FormatTag(bytes).data());
}

// Tags from other processes are bounded: past kMaxFormatTags, a new one is refused with
// its reason, while the ones interned already (and locally made tags) still resolve.
TEST(FormatTagTest, InternRefusesNewTagsPastTheBound) {
  const FormatTag known = "known|L2/H2/D64/T16/fp16/W0/S0|none";
  size_t refused_at = 0;
  for (size_t i = 0; i <= FormatTag::kMaxFormatTags; ++i) {
    const Result<FormatTag> tag = FormatTag::Intern("flood-" + std::to_string(i));
    if (!tag.ok()) {
      EXPECT_EQ(tag.status().code(), StatusCode::kResourceExhausted);
      EXPECT_NE(tag.status().message().find("distinct format tags"), std::string::npos)
          << tag.status();
      refused_at = i;
      break;
    }
  }
  EXPECT_GT(refused_at, 0u) << "the bound was never reached";
  EXPECT_EQ(FormatTag::Intern("known|L2/H2/D64/T16/fp16/W0/S0|none").value(), known);
  EXPECT_EQ(FormatTag::Intern("flood-0").value(), FormatTag("flood-0"));
  EXPECT_EQ(FormatTag("made-here-after-the-bound").str(), "made-here-after-the-bound");
}

}  // namespace
}  // namespace kvtier::storage
