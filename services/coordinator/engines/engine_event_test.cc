#include "services/coordinator/engines/engine_event.h"

#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <string>
#include <vector>

namespace kvtier::coordinator {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

std::vector<uint8_t> Bytes(const msgpack::sbuffer& b) {
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(b.data()),
                              reinterpret_cast<const uint8_t*>(b.data()) + b.size());
}

void Tokens(Packer& p, uint32_t first, uint32_t n) {
  p.pack_array(n);
  for (uint32_t i = 0; i < n; ++i) p.pack(first + i);
}

// SGLang's array form at 612d579: [ts, [events...], attn_dp_rank]; each event
// positional.
TEST(EngineEventTest, DecodesTheArrayForm) {
  msgpack::sbuffer b;
  Packer p(b);
  p.pack_array(3);
  p.pack(1700000000.25);
  p.pack_array(3);
  p.pack_array(6);  // ["BlockStored", block_hashes, parent, token_ids,
                    // block_size, lora_id]
  p.pack("BlockStored");
  p.pack_array(2);
  p.pack(uint64_t{11});
  p.pack(int64_t{-1});  // int64: the bit pattern is kept
  p.pack(uint64_t{7});
  Tokens(p, 100, 8);
  p.pack(4);
  p.pack_nil();
  p.pack_array(2);
  p.pack("BlockRemoved");
  p.pack_array(1);
  p.pack(uint64_t{11});
  p.pack_array(1);
  p.pack("AllBlocksCleared");
  p.pack(2);

  Result<EngineEventBatch> batch = DecodeEngineEvents(Bytes(b));
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_DOUBLE_EQ(batch->ts, 1700000000.25);
  EXPECT_EQ(batch->dp_rank, 2u);
  ASSERT_EQ(batch->events.size(), 3u);
  const auto& stored = std::get<EngineBlockStored>(batch->events[0]);
  ASSERT_EQ(stored.hashes.size(), 2u);
  EXPECT_EQ(stored.hashes[0], (EngineHash{0, 11}));
  EXPECT_EQ(stored.hashes[1], (EngineHash{0, ~uint64_t{0}}));
  EXPECT_EQ(stored.parent, (EngineHash{0, 7}));
  EXPECT_EQ(stored.block_size, 4u);
  EXPECT_EQ(stored.tokens.front(), 100u);
  EXPECT_EQ(stored.tokens.size(), 8u);
  EXPECT_FALSE(stored.lora_id.has_value());
  EXPECT_EQ(stored.medium, "");
  EXPECT_EQ(std::get<EngineBlockRemoved>(batch->events[1]).hashes,
            std::vector<EngineHash>{(EngineHash{0, 11})});
  EXPECT_TRUE(std::holds_alternative<EngineAllCleared>(batch->events[2]));
}

// vLLM's map form at 0181ea3: an envelope map, events tagged by "type", bytes
// hashes.
TEST(EngineEventTest, DecodesTheMapFormAndIgnoresUnknownKeys) {
  msgpack::sbuffer b;
  Packer p(b);
  p.pack_map(4);
  p.pack("ts");
  p.pack(12.5);
  p.pack("future_field");
  p.pack("ignored");
  p.pack("data_parallel_rank");
  p.pack(1);
  p.pack("events");
  p.pack_array(2);
  p.pack_map(11);
  p.pack("type");
  p.pack("BlockStored");
  p.pack("block_hashes");
  p.pack_array(1);
  const std::string digest(32, '\x5a');
  p.pack_bin(32);
  p.pack_bin_body(digest.data(), 32);
  p.pack("parent_block_hash");
  p.pack_nil();
  p.pack("token_ids");
  Tokens(p, 1, 4);
  p.pack("block_size");
  p.pack(4);
  p.pack("lora_id");
  p.pack(3);
  p.pack("medium");
  p.pack("CPU");
  p.pack("lora_name");
  p.pack("sql-lora");
  p.pack("extra_keys");
  p.pack_array(1);
  p.pack_array(3);
  p.pack("sql-lora");
  p.pack(uint64_t{42});
  p.pack("salt-1");
  p.pack("group_idx");
  p.pack(1);
  p.pack("kv_cache_spec_kind");
  p.pack("full_attention");
  p.pack_map(2);
  p.pack("type");
  p.pack("SomethingNew");
  p.pack("x");
  p.pack(1);

  Result<EngineEventBatch> batch = DecodeEngineEvents(Bytes(b));
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->dp_rank, 1u);
  EXPECT_EQ(batch->unknown_events, 1u);
  ASSERT_EQ(batch->events.size(), 1u);
  const auto& stored = std::get<EngineBlockStored>(batch->events[0]);
  EXPECT_NE(stored.hashes[0].hi >> 63, 0u) << "a bytes hash is marked apart from integer hashes";
  EXPECT_FALSE(stored.parent.has_value());
  EXPECT_EQ(stored.lora_id, 3u);
  EXPECT_EQ(stored.medium, "CPU");
  EXPECT_EQ(stored.lora_name, "sql-lora");
  EXPECT_EQ(stored.group, 1u);
  ASSERT_EQ(stored.extra_keys.size(), 1u);
  ASSERT_EQ(stored.extra_keys[0].size(), 3u);
  EXPECT_EQ(stored.extra_keys[0][0], "sql-lora");
  EXPECT_NE(stored.extra_keys[0][1], "42") << "an integer extra key is not the string \"42\"";
  EXPECT_EQ(stored.extra_keys[0][2], "salt-1");
}

// TensorRT-LLM at 13599e9: an array envelope with map events, string token ids,
// locality.
TEST(EngineEventTest, DecodesTensorRtLlmEvents) {
  msgpack::sbuffer b;
  Packer p(b);
  p.pack_array(2);
  p.pack(1.0);
  p.pack_array(2);
  p.pack_map(6);
  p.pack("type");
  p.pack("BlockStored");
  p.pack("block_hashes");
  p.pack_array(1);
  p.pack(uint64_t{5});
  p.pack("parent_block_hash");
  p.pack_nil();
  p.pack("token_ids");
  p.pack_array(2);
  p.pack(9);
  p.pack("<image:abc>");
  p.pack("block_size");
  p.pack(2);
  p.pack("locality");
  p.pack("REMOTE");
  p.pack_map(3);
  p.pack("type");
  p.pack("BlockRemoved");
  p.pack("block_hashes");
  p.pack_array(1);
  p.pack(uint64_t{5});
  p.pack("medium");
  p.pack("GPU");

  Result<EngineEventBatch> batch = DecodeEngineEvents(Bytes(b));
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_FALSE(batch->dp_rank.has_value());
  const auto& stored = std::get<EngineBlockStored>(batch->events[0]);
  EXPECT_TRUE(stored.remote);
  ASSERT_EQ(stored.text_tokens.size(), 1u);
  EXPECT_EQ(stored.text_tokens[0], (std::pair<uint32_t, std::string>{1, "<image:abc>"}));
  EXPECT_EQ(std::get<EngineBlockRemoved>(batch->events[1]).medium, "GPU");
}

TEST(EngineEventTest, MalformedPayloadsAreRefusedByName) {
  const auto decode = [](const msgpack::sbuffer& b) {
    return DecodeEngineEvents(Bytes(b)).status();
  };
  {
    const std::vector<uint8_t> junk = {0xc1, 0x00, 0x17};
    Status s = DecodeEngineEvents(junk).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("not msgpack"), std::string::npos) << s.ToString();
  }
  {
    msgpack::sbuffer b;
    Packer p(b);
    p.pack_array(2);
    p.pack(1.0);
    p.pack_array(1);
    p.pack_array(5);
    p.pack("BlockStored");
    p.pack_array(2);
    p.pack(1);
    p.pack(2);
    p.pack_nil();
    Tokens(p, 0, 5);  // two blocks of 4 need 8
    p.pack(4);
    Status s = decode(b);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("5 token ids for 2 blocks of 4"), std::string::npos) << s.ToString();
  }
  {
    msgpack::sbuffer b;
    Packer p(b);
    p.pack_array(2);
    p.pack(1.0);
    p.pack_array(1);
    p.pack_array(2);
    p.pack("BlockRemoved");
    p.pack("not-a-list");
    Status s = decode(b);
    EXPECT_NE(s.message().find("block_hashes is not an array"), std::string::npos) << s.ToString();
  }
  {
    msgpack::sbuffer b;
    Packer p(b);
    p.pack(17);
    EXPECT_NE(decode(b).message().find("neither an array nor a map"), std::string::npos);
  }
  {
    msgpack::sbuffer b;
    Packer p(b);
    p.pack_array(2);
    p.pack(1.0);
    p.pack_array(1);
    p.pack_map(1);
    p.pack("block_hashes");
    p.pack_array(0);
    EXPECT_NE(decode(b).message().find("no \"type\""), std::string::npos);
  }
}

TEST(EngineEventTest, FormatsAreNamed) {
  EXPECT_EQ(*ParseEngineFormat("sglang"), EngineFormat::kSglang);
  EXPECT_EQ(EngineFormatName(*ParseEngineFormat("trtllm")), "trtllm");
  Status s = ParseEngineFormat("tgi").status();
  EXPECT_NE(s.message().find("\"tgi\""), std::string::npos);
}

}  // namespace
}  // namespace kvtier::coordinator
