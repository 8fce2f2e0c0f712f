#include "common/kv_layout.h"

#include <set>

#include <gtest/gtest.h>

namespace kvtier {
namespace {

KvLayoutOptions Llama8B() {
  // Llama-3-8B: 32 layers, 8 KV heads (GQA), head_dim 128; 16-token blocks in bf16.
  return KvLayoutOptions{32, 8, 128, 16, KvDtype::kBf16, 0, 0};
}

TEST(KvLayoutTest, BytesPerBlockCountsOnlyKvHeads) {
  Result<KvLayout> layout = KvLayout::Create(Llama8B());
  ASSERT_TRUE(layout.ok()) << layout.status();
  // 32 layers * 2 (k,v) * 8 heads * 16 tokens * 128 dims * 2 bytes = 2 MiB.
  EXPECT_EQ(layout->bytes_per_block(), 2u * 1024 * 1024);
  EXPECT_EQ(layout->bytes_per_head_run(), 16u * 128 * 2);
}

TEST(KvLayoutTest, OffsetsFollowLayerPartHeadTokenOrder) {
  const KvLayout layout = *KvLayout::Create({2, 3, 4, 8, KvDtype::kFp32, 0, 0});
  const size_t run = 8 * 4 * 4;  // tokens * head_dim * 4 bytes
  EXPECT_EQ(layout.ByteOffset(0, KvPart::kKey, 0, 0), 0u);
  EXPECT_EQ(layout.ByteOffset(0, KvPart::kKey, 0, 1), 16u);        // next token: head_dim * 4 bytes
  EXPECT_EQ(layout.ByteOffset(0, KvPart::kKey, 1, 0), run);        // next head
  EXPECT_EQ(layout.ByteOffset(0, KvPart::kValue, 0, 0), 3 * run);  // values after all key heads
  EXPECT_EQ(layout.ByteOffset(1, KvPart::kKey, 0, 0), 6 * run);    // next layer
  EXPECT_EQ(layout.ByteOffset(1, KvPart::kValue, 2, 7) + 16,
            layout.bytes_per_block());  // last element ends the block
  // Every (layer, part, head, token) maps to a distinct offset.
  std::set<size_t> offsets;
  for (uint32_t l = 0; l < 2; ++l)
    for (KvPart p : {KvPart::kKey, KvPart::kValue})
      for (uint32_t h = 0; h < 3; ++h)
        for (uint32_t t = 0; t < 8; ++t) offsets.insert(layout.ByteOffset(l, p, h, t));
  EXPECT_EQ(offsets.size(), 2u * 2 * 3 * 8);
}

TEST(KvLayoutTest, RejectsEachInvalidFieldByName) {
  struct Case {
    KvLayoutOptions options;
    const char* field;
  };
  const Case cases[] = {
      {{0, 8, 128, 16, KvDtype::kFp16, 0, 0}, "num_layers"},
      {{32, 0, 128, 16, KvDtype::kFp16, 0, 0}, "num_kv_heads"},
      {{32, 8, 0, 16, KvDtype::kFp16, 0, 0}, "head_dim"},
      {{32, 8, 128, 1, KvDtype::kFp16, 0, 0}, "tokens_per_block"},   // must be > 1
      {{32, 8, 128, 24, KvDtype::kFp16, 0, 0}, "tokens_per_block"},  // not a power of two
      {{32, 8, 128, 16, KvDtype::kFp16, 0, 4}, "sink_tokens"},       // sinks without a window
      {{32, 8, 128, 16, KvDtype::kFp16, 64, 64}, "sink_tokens"},     // sinks fill the window
  };
  for (const Case& c : cases) {
    Result<KvLayout> layout = KvLayout::Create(c.options);
    ASSERT_FALSE(layout.ok()) << c.field;
    EXPECT_EQ(layout.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(layout.status().message().find(c.field), std::string::npos) << layout.status();
  }
}

TEST(KvLayoutTest, CheckedOffsetRejectsOutOfRange) {
  const KvLayout layout = *KvLayout::Create(Llama8B());
  EXPECT_TRUE(layout.CheckedByteOffset(31, KvPart::kValue, 7, 15).ok());
  EXPECT_NE(layout.CheckedByteOffset(32, KvPart::kKey, 0, 0).status().message().find("layer"),
            std::string::npos);
  EXPECT_NE(layout.CheckedByteOffset(0, KvPart::kKey, 8, 0).status().message().find("kv_head"),
            std::string::npos);
  EXPECT_NE(layout.CheckedByteOffset(0, KvPart::kKey, 0, 16).status().message().find("token"),
            std::string::npos);
}

TEST(KvLayoutTest, MismatchIsAnErrorNamingTheField) {
  const KvLayout ours = *KvLayout::Create(Llama8B());
  KvLayoutOptions fp8 = Llama8B();
  fp8.dtype = KvDtype::kFp8E4m3;
  KvLayoutOptions windowed = Llama8B();
  windowed.attention_window = 4096;
  EXPECT_TRUE(ours.CheckCompatible(*KvLayout::Create(Llama8B())).ok());
  Status dtype = ours.CheckCompatible(*KvLayout::Create(fp8));
  EXPECT_EQ(dtype.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(dtype.message(),
            "kv layout mismatch: dtype is bf16 here but fp8_e4m3 on the other side");
  EXPECT_NE(ours.CheckCompatible(*KvLayout::Create(windowed)).message().find("attention_window"),
            std::string::npos);
  EXPECT_EQ(ours.Fingerprint(), "L32/H8/D128/T16/bf16/W0/S0");
}

TEST(KvLayoutTest, DtypeNamesRoundTrip) {
  for (KvDtype d :
       {KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16, KvDtype::kFp8E4m3, KvDtype::kInt8,
        KvDtype::kInt4}) {
    Result<KvDtype> parsed = ParseDtype(DtypeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(DtypeBytes(KvDtype::kFp8E4m3), 1u);
  EXPECT_EQ(DtypeBytes(KvDtype::kInt4), 0u) << "not a whole byte";
  EXPECT_FALSE(ParseDtype("fp64").ok());
}

// A quantized block: its values (int4: two a byte), then an fp32 scale per (layer, k|v,
// head, token); the offsets of both inside it.
TEST(KvLayoutTest, QuantizedBlocksHoldTheirScalesAfterTheValues) {
  const auto make = [](KvDtype dtype, uint32_t head_dim = 128) {
    return KvLayout::Create({.num_layers = 2,
                             .num_kv_heads = 4,
                             .head_dim = head_dim,
                             .tokens_per_block = 16,
                             .dtype = dtype});
  };
  const KvLayout fp16 = *make(KvDtype::kFp16), int8 = *make(KvDtype::kInt8),
                 int4 = *make(KvDtype::kInt4), fp8 = *make(KvDtype::kFp8E4m3);
  const size_t scales = 2 * 2 * 4 * 16 * sizeof(float);
  EXPECT_FALSE(fp16.quantized());
  EXPECT_EQ(fp16.bytes_per_block(), fp16.bytes_of_values());
  EXPECT_EQ(int8.bytes_of_values(), fp16.bytes_of_values() / 2);
  EXPECT_EQ(int8.bytes_per_block(), int8.bytes_of_values() + scales);
  EXPECT_EQ(fp8.bytes_per_block(), int8.bytes_per_block());
  EXPECT_EQ(int4.bytes_of_values(), fp16.bytes_of_values() / 4);
  EXPECT_EQ(int4.bytes_per_block(), int4.bytes_of_values() + scales);
  EXPECT_EQ(int4.bytes_per_head_row(), 64u);
  EXPECT_EQ(int4.ByteOffset(1, KvPart::kValue, 3, 5), ((1 * 2 + 1) * 4 + 3) * 16 * 64 + 5 * 64u);
  EXPECT_EQ(int4.ScaleOffset(0, KvPart::kKey, 0, 0), int4.bytes_of_values());
  EXPECT_EQ(int4.ScaleOffset(1, KvPart::kValue, 3, 5),
            int4.bytes_of_values() + (((1 * 2 + 1) * 4 + 3) * 16 + 5) * sizeof(float));
  EXPECT_EQ(int4.ScaleOffset(1, KvPart::kValue, 3, 15) + sizeof(float), int4.bytes_per_block());
  EXPECT_NE(int4.CheckCompatible(int8).message().find("dtype is int4 here but int8"),
            std::string::npos);
  const Result<KvLayout> odd = make(KvDtype::kInt4, 7);
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("must be even for int4"), std::string::npos);
}

}  // namespace
}  // namespace kvtier
