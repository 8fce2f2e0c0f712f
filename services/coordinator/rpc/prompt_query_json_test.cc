#include "services/coordinator/rpc/prompt_query_json.h"

#include <gtest/gtest.h>

namespace kvtier::coordinator {
namespace {

PromptQuery Parsed(std::string_view json) {
  Result<PromptQuery> q = ParsePromptQuery(json);
  EXPECT_TRUE(q.ok()) << json << ": " << q.status();
  return q.ok() ? *q : PromptQuery{};
}

// The error's message, which must name what was wrong.
std::string Refused(std::string_view json) {
  Result<PromptQuery> q = ParsePromptQuery(json);
  EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument) << json;
  return std::string(q.status().message());
}

TEST(PromptQueryJsonTest, ReadsEveryFieldOfTheApi) {
  const PromptQuery q = Parsed(R"( {"tokens": [128000, 0, 4294967295], "cache_salt": "s",
      "lora_name": "sql-lora", "model": "llama", "lora_id": 7,
      "candidates": ["vllm-0", "sglang-0/dp1"], "candidate_active_blocks": [120, 40]} )");
  EXPECT_EQ(q.tokens, (std::vector<uint32_t>{128000, 0, 4294967295u}));
  EXPECT_EQ(q.cache_salt, "s");
  EXPECT_EQ(q.lora_name, "sql-lora");
  EXPECT_EQ(q.model, "llama");
  EXPECT_EQ(q.lora_id, 7u);
  EXPECT_EQ(q.candidates, (std::vector<std::string>{"vllm-0", "sglang-0/dp1"}));
  EXPECT_EQ(q.candidate_active_blocks, (std::vector<uint32_t>{120, 40}));
  EXPECT_EQ(Parsed("{}"), PromptQuery{});
  EXPECT_EQ(Parsed("{\"tokens\":[]}"), PromptQuery{});
}

TEST(PromptQueryJsonTest, UnknownKeysAreSkippedNullIsAbsentAndTheLastRepeatCounts) {
  const PromptQuery q = Parsed(R"({"stream": true, "tokens": [1, 2],
      "extra": {"a": [1.5e-3, -0, null, false, {"b": "]}"}]}, "model": null,
      "tokens": [3], "lora_id": "18446744073709551615"})");
  EXPECT_EQ(q.tokens, std::vector<uint32_t>{3});
  EXPECT_EQ(q.model, "");
  EXPECT_EQ(q.lora_id, 18446744073709551615ull);
}

TEST(PromptQueryJsonTest, StringsTakeEveryEscapeAndSurrogatePairs) {
  const PromptQuery q =
      Parsed(R"({"cache_salt": "a\"b\\c\/d\b\f\n\r\t\u00e9\u20ac\ud83d\ude00", "model": "é"})");
  EXPECT_EQ(q.cache_salt, "a\"b\\c/d\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  EXPECT_EQ(q.model, "\xc3\xa9");
}

TEST(PromptQueryJsonTest, WrongTypesAndBadNumbersAreRefusedByName) {
  EXPECT_NE(Refused(R"({"tokens": [1, 1.5]})").find("tokens[1]"), std::string::npos);
  EXPECT_NE(Refused(R"({"tokens": [4294967296]})").find("[0, 4294967295]"), std::string::npos);
  EXPECT_NE(Refused(R"({"tokens": [-1]})").find("tokens[0]"), std::string::npos);
  EXPECT_NE(Refused(R"({"tokens": [01]})").find("tokens[0]"), std::string::npos);
  EXPECT_NE(Refused(R"({"tokens": [1e3]})").find("whole number"), std::string::npos);
  EXPECT_NE(Refused(R"({"tokens": "1,2"})").find("tokens: an array"), std::string::npos);
  EXPECT_NE(Refused(R"({"model": 7})").find("model"), std::string::npos);
  EXPECT_NE(Refused(R"({"candidates": ["a", 2]})").find("candidates[1]"), std::string::npos);
  EXPECT_NE(Refused(R"({"lora_id": "7x"})").find("lora_id"), std::string::npos);
}

TEST(PromptQueryJsonTest, WhatIsNotJsonIsRefusedWithItsByte) {
  EXPECT_NE(Refused("[1, 2]").find("a JSON object at byte 0"), std::string::npos);
  EXPECT_NE(Refused("").find("a JSON object"), std::string::npos);
  EXPECT_NE(Refused(R"({"tokens": [1, 2})").find("',' or ']'"), std::string::npos);
  EXPECT_NE(Refused(R"({"tokens": [1]} x)").find("text after the object at byte 16"),
            std::string::npos);
  EXPECT_NE(Refused(R"({"tokens": [1],})").find("a string"), std::string::npos);
  EXPECT_NE(Refused("{\"model\": \"a\nb\"}").find("control character"), std::string::npos);
  EXPECT_NE(Refused(R"({"model": "\ud83d"})").find("surrogate"), std::string::npos);
  EXPECT_NE(Refused(R"({"model": "\q"})").find("unknown escape"), std::string::npos);
  EXPECT_NE(Refused(R"({"model": "abc)").find("unterminated"), std::string::npos);
  EXPECT_NE(Refused(R"({"x": tru})").find("expected a value"), std::string::npos);
  EXPECT_NE(Refused(R"({"x": 1.})").find("after '.'"), std::string::npos);
  EXPECT_NE(Refused(R"({"x": [1 2]})").find("',' or ']'"), std::string::npos);
}

TEST(PromptQueryJsonTest, DeepNestingIsRefusedNotRecursedWithoutBound) {
  const std::string deep = "{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_NE(Refused(deep).find("nested too deep"), std::string::npos);
  const std::string fine = "{\"x\": " + std::string(60, '[') + std::string(60, ']') + "}";
  EXPECT_TRUE(ParsePromptQuery(fine).ok());
}

TEST(PromptQueryJsonTest, ItsOwnJsonReadsBackEqual) {
  PromptQuery q;
  q.tokens = {1, 2, 4294967295u};
  q.cache_salt = "quote\" back\\ nl\n \x01 é";
  q.lora_name = "l";
  q.model = "m";
  q.lora_id = 18446744073709551615ull;
  q.candidates = {"a", ""};
  q.candidate_active_blocks = {0, 9};
  const Result<PromptQuery> back = ParsePromptQuery(PromptQueryJson(q));
  ASSERT_TRUE(back.ok()) << back.status() << " " << PromptQueryJson(q);
  EXPECT_EQ(*back, q);
}

}  // namespace
}  // namespace kvtier::coordinator
