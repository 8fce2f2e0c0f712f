// The kvtier binary's bench and replay subcommands as a user runs them: each prints one
// JSON object (or its report for people), cleans up after itself, and names bad input.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "tests/testing/test_util.h"

namespace kvtier {
namespace {

using std::chrono::seconds;
using testing::ChildProcess;

const std::string kKvtier = std::string(KVTIER_BIN_DIR) + "/kvtier";

// A small transfer through a store, a raw loopback stream and a Redis server the bench
// starts itself (scripts/install-deps.sh installs redis-server), with the command line
// as its issue spells it (--block-size).
TEST(KvtierBenchReplayTest, BenchTransferPrintsOneJsonObject) {
  testing::TempDir dir;
  ChildProcess child({kKvtier, "bench", "transfer", "--block-size", "65536", "--total-bytes",
                      "4194304", "--clients", "2", "--vs-redis", "--json"},
                     dir.path());
  ASSERT_EQ(child.Wait(seconds(60)), 0) << child.Stderr();
  const std::string out = child.Stdout();
  for (const char* key :
       {"\"put_gbps\":", "\"get_gbps\":", "\"loopback_gbps\":", "\"loopback_from_memory_gbps\":",
        "\"p99_ms\":", "\"redis_put_gbps\":", "\"redis_get_gbps\":",
        "\"blocks\":64,",  // 4 MiB of 64 KiB
        // where each phase's time went
        "\"inline_get_cores\":{\"control\":", "\"stream_put_cores\":{\"control\":",
        "\"stream_get_open_share\":", "\"stream_put\":\"keys\""}) {
    EXPECT_NE(out.find(key), std::string::npos) << key << " in " << out;
  }
  EXPECT_EQ(out.find("null"), std::string::npos) << "every figure was measured: " << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "one JSON object on one line";

  // Keyed gets pipelined two deep: the untimed pass still compares every byte it reads.
  ChildProcess pipelined(
      {kKvtier, "bench", "transfer", "--block-size", "65536", "--total-bytes", "4194304",
       "--clients", "2", "--path", "stream", "--stream-gets-in-flight", "2", "--json"},
      dir.path());
  ASSERT_EQ(pipelined.Wait(seconds(60)), 0) << pipelined.Stderr();
  EXPECT_NE(pipelined.Stdout().find("\"gets_in_flight\":2,"), std::string::npos)
      << pipelined.Stdout();

  // --tls: the same paths over TLS, with a certificate the bench makes and removes.
  ChildProcess tls({kKvtier, "bench", "transfer", "--block-size", "65536", "--total-bytes",
                    "4194304", "--clients", "2", "--path", "stream", "--tls", "--json"},
                   dir.path());
  ASSERT_EQ(tls.Wait(seconds(60)), 0) << tls.Stderr();
  for (const char* key : {"\"stream_put_gbps\":", "\"tls_stream_put_gbps\":",
                          "\"tls_stream_get_gbps\":"}) {
    EXPECT_NE(tls.Stdout().find(key), std::string::npos) << key << " in " << tls.Stdout();
  }
  EXPECT_EQ(tls.Stdout().find("tls_inline"), std::string::npos) << "--path stream only";

  ChildProcess bad({kKvtier, "bench", "transfer", "--block-bytes", "65536", "--total-bytes",
                    "65536", "--clients", "2"},
                   dir.path());
  EXPECT_EQ(bad.Wait(seconds(30)), 2);
  EXPECT_NE(bad.Stderr().find("every client at least one block"), std::string::npos)
      << bad.Stderr();
}

TEST(KvtierBenchReplayTest, BenchIndexPrintsOneJsonObject) {
  testing::TempDir dir;
  ASSERT_TRUE(testing::WriteFile(
      dir.File("trace.jsonl"),
      "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
      "{\"timestamp\": 5, \"input_length\": 1536, \"output_length\": 5, \"hash_ids\": [0, 1, "
      "2]}\n"));
  ChildProcess child(
      {kKvtier, "bench", "index", "--trace", dir.File("trace.jsonl"), "--passes", "1", "--json"},
      dir.path());
  ASSERT_EQ(child.Wait(seconds(30)), 0) << child.Stderr();
  const std::string out = child.Stdout();
  for (const char* key :
       {"\"ops_per_sec\":", "\"lookup_p50_us\":", "\"lookup_p99_us\":", "\"bytes_per_block\":",
        "\"hit_rate\":0.4000"}) {  // 2 of 5 prompt blocks were cached
    EXPECT_NE(out.find(key), std::string::npos) << key << " in " << out;
  }
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "one JSON object on one line";

  ASSERT_TRUE(testing::WriteFile(dir.File("bad.jsonl"), "{\"timestamp\": 0}\n"));
  ChildProcess bad({kKvtier, "bench", "index", "--trace", dir.File("bad.jsonl")}, dir.path());
  EXPECT_EQ(bad.Wait(seconds(30)), 2);
  EXPECT_NE(bad.Stderr().find("line 1: missing field \"input_length\""), std::string::npos)
      << bad.Stderr();
}

// `kvtier replay` with no --connect starts its own cluster: two prompts sharing their
// first block, with room for everything. A dead process's pool in /dev/shm, which the
// replay's worker sweeps and logs, is there too: logs go to stderr, never into the JSON.
TEST(KvtierBenchReplayTest, ReplayPrintsOneJsonObjectAndReportsTheBound) {
  testing::TempDir dir;
  const std::string stale = "/dev/shm/kvtier-pool-clitest" + std::to_string(::getpid());
  ASSERT_TRUE(testing::WriteFile(stale, "left by a process that died"));
  std::this_thread::sleep_for(
      std::chrono::milliseconds(2100));  // the sweep spares pools under 2 s old
  ASSERT_TRUE(testing::WriteFile(
      dir.File("trace.jsonl"),
      "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 5, \"hash_ids\": [7, 8]}\n"
      "{\"timestamp\": 5, \"input_length\": 1536, \"output_length\": 5, \"hash_ids\": [7, 9, "
      "10]}\n"));
  ChildProcess child({kKvtier, "replay", "--trace", dir.File("trace.jsonl"), "--gpu-blocks", "64",
                      "--host-blocks", "0", "--disk-blocks", "0", "--json"},
                     dir.path());
  ASSERT_EQ(child.Wait(seconds(60)), 0) << child.Stderr();
  const std::string out = child.Stdout();
  for (const char* key :
       {"\"requests\": 2,", "\"block_hit_rate\": 0.200000", "\"token_hit_rate\": 0.200000",
        "\"hits_by_tier\": {\"gpu\": 1, \"host\": 0, \"disk\": 0, \"remote\": 0}",
        "\"unbounded_block_hit_rate\": 0.200000", "\"lookup_p99_us\": "}) {
    EXPECT_NE(out.find(key), std::string::npos) << key << " in " << out;
  }
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "one JSON object on one line: " << out;
  ::unlink(stale.c_str());  // in case another process's sweep did not take it either

  // Without --json: the report for people.
  ChildProcess text({kKvtier, "replay", "--conversations", "10", "--gpu-blocks", "256"},
                    dir.path());
  ASSERT_EQ(text.Wait(seconds(60)), 0) << text.Stderr();
  EXPECT_NE(text.Stdout().find("block hit rate"), std::string::npos) << text.Stdout();
  EXPECT_NE(text.Stdout().find("the built-in chat workload"), std::string::npos) << text.Stdout();

  // --limit: the first request alone (block 7 new, block 8 new: no hit).
  ChildProcess first(
      {kKvtier, "replay", "--trace", dir.File("trace.jsonl"), "--limit", "1", "--gpu-blocks", "64"},
      dir.path());
  ASSERT_EQ(first.Wait(seconds(60)), 0) << first.Stderr();
  EXPECT_NE(first.Stdout().find("1 requests of trace.jsonl (its first 1 of 2)"), std::string::npos)
      << first.Stdout();
  EXPECT_NE(first.Stdout().find("block hit rate  0.0000"), std::string::npos) << first.Stdout();

  // Bad input: exit 2, naming what was wrong.
  for (const auto& [args, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--block-bytes", "1000"}, "--block-bytes 1000: must be a positive multiple of 2048"},
           {{"--connect", "127.0.0.1:1", "--gpu-blocks", "5"},
            "--gpu-blocks sizes the embedded cluster"},
           {{"--trace", dir.File("missing.jsonl")}, "--trace"},
           {{"--workers", "0"}, "--workers"},
           {{"--one-off-share", "1.5"}, "--one-off-share"},
           {{"--trace", dir.File("trace.jsonl"), "--one-off-share", "0.5"},
            "--one-off-share shapes the built-in workload, not --trace"},
           {{"--coordinator", "127.0.0.1:1"}, "--coordinator goes with --connect"},
           {{"--disk-admission", "lfu"}, "--disk-admission: lfu not in {all,min-count,tinylfu}"}}) {
    std::vector<std::string> argv = {kKvtier, "replay"};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess bad(argv, dir.path());
    EXPECT_EQ(bad.Wait(seconds(30)), 2) << args[0];
    EXPECT_NE(bad.Stderr().find(expected), std::string::npos) << bad.Stderr();
  }
  // Nothing answers at --connect: exit 1.
  ChildProcess unreachable({kKvtier, "replay", "--connect", "127.0.0.1:1", "--token", "t"},
                           dir.path());
  EXPECT_EQ(unreachable.Wait(seconds(30)), 1);
  EXPECT_NE(unreachable.Stderr().find("UNAVAILABLE"), std::string::npos) << unreachable.Stderr();
}

// The number after `"key": ` in a replay's JSON; -1 when absent.
int64_t JsonNumber(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\": ");
  return at == std::string::npos ? -1 : std::stoll(json.substr(at + key.size() + 4));
}

// The first `key`'s value as a real number; -1 when absent.
double JsonReal(const std::string& json, const std::string& key) {
  const size_t at = json.find("\"" + key + "\": ");
  return at == std::string::npos ? -1 : std::stod(json.substr(at + key.size() + 4));
}

// A disk tier that fills early: admit-all writes every block the host tier evicts;
// TinyLFU keeps some out, unwritten, and writes less.
TEST(KvtierBenchReplayTest, ReplayReportsDiskWritesAndWhatAdmissionKeptOut) {
  testing::TempDir dir;
  std::map<std::string, std::string> out;
  for (const char* policy : {"all", "tinylfu"}) {
    ChildProcess child(
        {kKvtier, "replay", "--conversations", "60", "--gpu-blocks", "16", "--host-blocks", "16",
         "--disk-blocks", "48", "--disk-admission", policy, "--json"},
        dir.path());
    ASSERT_EQ(child.Wait(seconds(60)), 0) << child.Stderr();
    out[policy] = child.Stdout();
  }
  EXPECT_GT(JsonNumber(out["all"], "disk_written_bytes"), 48 * 4096) << "the disk filled";
  EXPECT_EQ(JsonNumber(out["all"], "dropped_by_admission"), 0) << out["all"];
  EXPECT_GT(JsonNumber(out["tinylfu"], "dropped_by_admission"), 0) << out["tinylfu"];
  EXPECT_LT(JsonNumber(out["tinylfu"], "disk_written_bytes"),
            JsonNumber(out["all"], "disk_written_bytes"));
  ChildProcess text(
      {kKvtier, "replay", "--conversations", "60", "--gpu-blocks", "16", "--host-blocks", "16",
       "--disk-blocks", "48", "--disk-admission", "min-count", "--disk-admission-min-count", "3"},
      dir.path());
  ASSERT_EQ(text.Wait(seconds(60)), 0) << text.Stderr();
  EXPECT_NE(text.Stdout().find("disk (admission min-count 3)"), std::string::npos) << text.Stdout();
  EXPECT_NE(text.Stdout().find("blocks kept out by admission"), std::string::npos) << text.Stdout();
}

// --layout: a pool per window, the same replay with every layer full beside it, and what
// the windows save of the sequences' KV; flags that do not go with it are named.
TEST(KvtierBenchReplayTest, ReplayLayoutComparesAgainstAllFullPools) {
  testing::TempDir dir;
  ChildProcess child(
      {kKvtier, "replay", "--conversations", "40", "--layout", "1024,8192", "--sink-tokens", "512",
       "--block-bytes", "8192", "--gpu-blocks", "512", "--json"},
      dir.path());
  ASSERT_EQ(child.Wait(seconds(60)), 0) << child.Stderr();
  const std::string out = child.Stdout();
  EXPECT_NE(out.find("\"pools\": [\"L1/H1/D2/T512/fp16/W1024/S512\", "
                     "\"L1/H1/D2/T512/fp16/W8192/S512\"]"),
            std::string::npos)
      << out;
  EXPECT_GT(JsonReal(out, "block_hit_rate"), 0) << out;
  EXPECT_GT(JsonReal(out, "sequence_kv_saved"), 0.1) << out;
  EXPECT_NE(out.find("\"all_full\": {\"block_hit_rate\": "), std::string::npos) << out;
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--layout", "1024,8192", "--host-blocks", "4"},
        std::vector<std::string>{"--sink-tokens", "4"},
        std::vector<std::string>{"--layout", "1024,0"},
        std::vector<std::string>{"--layout", "1024,8192", "--block-bytes", "2048"}}) {
    std::vector<std::string> argv = {kKvtier, "replay", "--conversations", "4"};
    argv.insert(argv.end(), bad.begin(), bad.end());
    ChildProcess refused(argv, dir.path());
    EXPECT_EQ(refused.Wait(seconds(30)), 2) << bad[0] << " " << refused.Stderr();
    EXPECT_NE(refused.Stderr().find(bad[bad.size() == 2 ? 0 : 2]), std::string::npos)
        << refused.Stderr();
  }
}

TEST(KvtierBenchReplayTest, BenchLookupRpcAnswersEveryCall) {
  testing::TempDir dir;
  ASSERT_TRUE(testing::WriteFile(
      dir.File("trace.jsonl"),
      "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
      "{\"timestamp\": 5, \"input_length\": 1536, \"output_length\": 5, \"hash_ids\": [0, 1, "
      "2]}\n"));
  ChildProcess child({kKvtier, "bench", "lookup-rpc", "--trace", dir.File("trace.jsonl"), "--rate",
                      "500", "--seconds", "0.2", "--json"},
                     dir.path());
  ASSERT_EQ(child.Wait(seconds(60)), 0) << child.Stdout() << child.Stderr();
  const std::string out = child.Stdout();
  EXPECT_NE(out.find("\"calls\":100,\"errors\":0"), std::string::npos) << out;
  EXPECT_NE(out.find("\"indexed_blocks\":3"), std::string::npos) << out;
  EXPECT_NE(out.find("\"mean_matched_blocks\":2.50"), std::string::npos)
      << "every block is cached: " << out;
  EXPECT_NE(out.find("\"server_switches_per_call\":"), std::string::npos) << out;
}

// The routing API's bench: every call answered, the engine's whole prompt matched, by
// lookup and by route; a bad count is refused with exit code 2.
TEST(KvtierBenchReplayTest, BenchLookupHttpAnswersEveryCallWithTheWholePrompt) {
  testing::TempDir dir;
  for (const char* path : {"/v1/lookup", "/v1/route"}) {
    std::vector<std::string> argv = {
        kKvtier, "bench",     "lookup-http", "--tokens",      "64", "--prompts", "4", "--rate",
        "400",   "--seconds", "0.25",        "--connections", "4",  "--json"};
    if (std::string(path) == "/v1/route") argv.push_back("--route");
    ChildProcess child(argv, dir.path());
    ASSERT_EQ(child.Wait(seconds(60)), 0) << child.Stdout() << child.Stderr();
    const std::string out = child.Stdout();
    EXPECT_NE(out.find(std::string("\"path\":\"") + path + "\""), std::string::npos) << out;
    EXPECT_NE(out.find("\"calls\":100,\"errors\":0"), std::string::npos) << out;
    EXPECT_NE(out.find("\"matched_tokens\":64"), std::string::npos) << out;
  }
  ChildProcess bad({kKvtier, "bench", "lookup-http", "--tokens", "8"}, dir.path());
  EXPECT_EQ(bad.Wait(seconds(30)), 2) << bad.Stderr();
  EXPECT_NE(bad.Stderr().find("--tokens"), std::string::npos) << bad.Stderr();
}

TEST(KvtierBenchReplayTest, BenchPoolPrintsOneJsonObject) {
  testing::TempDir dir;
  // Small blocks and a short allocation loop: this checks the command, not the figures.
  ChildProcess child({kKvtier, "bench", "pool", "--block-bytes", "4096", "--batch-blocks", "8",
                      "--alloc-seconds", "0.05", "--cpu", "--json"},
                     dir.path());
  ASSERT_EQ(child.Wait(seconds(60)), 0) << child.Stderr();
  const std::string out = child.Stdout();
  for (const char* key : {"\"alloc_free_per_sec\":", "\"gather_gbps\":", "\"scatter_gbps\":",
                          "\"memcpy_gbps\":", "\"backend\":\"cpu\"", "\"block_bytes\":4096"}) {
    EXPECT_NE(out.find(key), std::string::npos) << key << " in " << out;
  }
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "one JSON object on one line";
  ChildProcess bad({kKvtier, "bench", "pool", "--block-bytes", "100"}, dir.path());
  EXPECT_EQ(bad.Wait(seconds(30)), 2) << "not a multiple of 16";
  EXPECT_NE(bad.Stderr().find("block_bytes must be a positive multiple of 16"), std::string::npos)
      << bad.Stderr();
}

TEST(KvtierBenchReplayTest, BenchDiskPrintsOneJsonObjectAndCleansUp) {
  testing::TempDir dir;
  // 4 MiB in 64 KiB blocks from two threads: this checks the command and its clean-up,
  // not the figures.
  ChildProcess child({kKvtier, "bench", "disk", "--dir", dir.path(), "--total-bytes", "4194304",
                      "--block-bytes", "65536", "--threads", "2", "--json"},
                     dir.path());
  ASSERT_EQ(child.Wait(seconds(60)), 0) << child.Stderr();
  const std::string out = child.Stdout();
  for (const char* key :
       {"\"put_gbps\":", "\"get_gbps\":", "\"raw_write_gbps\":", "\"raw_read_gbps\":",
        "\"put_batches_per_group\":", "\"blocks\":64", "\"sync\":\"wal\"", "\"threads\":2",
        "\"raw_write_sync\":\"page cache\""}) {
    EXPECT_NE(out.find(key), std::string::npos) << key << " in " << out;
  }
  // Under fsync the raw baseline syncs as the tier does: a batch at a time.
  ChildProcess synced({kKvtier, "bench", "disk", "--dir", dir.path(), "--total-bytes", "1048576",
                       "--block-bytes", "65536", "--sync", "fsync", "--json"},
                      dir.path());
  ASSERT_EQ(synced.Wait(seconds(60)), 0) << synced.Stderr();
  EXPECT_NE(synced.Stdout().find("\"raw_write_sync\":\"fdatasync per batch\""), std::string::npos)
      << synced.Stdout();
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << "one JSON object on one line";
  bool scratch_left = false;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    scratch_left |= entry.path().filename().string().rfind("kvtier-bench-disk-", 0) == 0;
  }
  EXPECT_FALSE(scratch_left) << "the scratch directory is removed";
  ChildProcess bad({kKvtier, "bench", "disk", "--dir", dir.path(), "--total-bytes", "8192",
                    "--block-bytes", "65536"},
                   dir.path());
  EXPECT_EQ(bad.Wait(seconds(30)), 2);
  EXPECT_NE(bad.Stderr().find("--total-bytes must hold at least one block"), std::string::npos)
      << bad.Stderr();
  ChildProcess too_many({kKvtier, "bench", "disk", "--dir", dir.path(), "--total-bytes", "131072",
                         "--block-bytes", "65536", "--threads", "3"},
                        dir.path());
  EXPECT_EQ(too_many.Wait(seconds(30)), 2) << "two blocks cannot go to three threads";
  EXPECT_NE(too_many.Stderr().find("--threads must be between 1 and the number of blocks"),
            std::string::npos)
      << too_many.Stderr();
}

}  // namespace
}  // namespace kvtier
