// Test fixture: a node's host tier behind a data stream on loopback, with keys, opens and
// buffers as the stream's tests make them. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "services/store/stream/data_stream_client.h"
#include "services/store/stream/data_stream_server.h"
#include "services/store/stream/testing/data_stream_fixture.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {

// A node's tiers (host memory) behind a data stream on loopback.
class DataStreamTest : public DataStreamFixture {
 protected:
  static constexpr size_t kBlockBytes = 64 * 1024;
  using TestBlock = storage::testing::TestBlock;
  static constexpr uint64_t kScope = storage::testing::kScope;
  void SetUp() override { Start({}); }

  void Start(DataStreamServerOptions options, uint64_t host_bytes = 64ull << 20) {
    StartNode(storage::testing::HostOnly(host_bytes), options);
  }

  static std::vector<BlockKey> Keys(const std::vector<uint64_t>& ids) {
    std::vector<BlockKey> keys;
    for (uint64_t id : ids) keys.push_back(storage::testing::MakeBlock(id, 1).header.key);
    return keys;
  }
  StreamGetOpened OpenGet(const std::vector<uint64_t>& ids, ExtraBlockSource* extra = nullptr) {
    return server_->OpenGet(Keys(ids), storage::testing::kFormat, kScope, extra).value();
  }

  // Buffers sized by the headers the open answered (empty for absent blocks).
  static std::vector<std::vector<uint8_t>> Buffers(const StreamGetOpened& opened) {
    std::vector<std::vector<uint8_t>> buffers;
    for (const auto& header : opened.headers)
      buffers.emplace_back(header ? header->payload_bytes : 0);
    return buffers;
  }
  static std::vector<std::span<uint8_t>> Spans(std::vector<std::vector<uint8_t>>& buffers) {
    return {buffers.begin(), buffers.end()};
  }
};

}  // namespace kvtier::store
