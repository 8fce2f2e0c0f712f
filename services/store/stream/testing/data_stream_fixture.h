// Test fixture: a node's tiers behind a data stream on loopback, for the stream's tests.
//
// Thread safety: the test's thread; the server runs its own loops.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/clock.h"
#include "services/store/stream/data_stream_client.h"
#include "services/store/stream/data_stream_server.h"
#include "storage/testing/blocks.h"
#include "storage/tiered_store.h"
#include "tests/testing/test_util.h"

// In kvtier::store itself: a nested `testing` namespace would hide kvtier::testing's
// helpers from the tests.
namespace kvtier::store {

class DataStreamFixture : public ::testing::Test {
 protected:
  // (Re)starts the node: `tiers` behind a data stream with `options` (its store and clock
  // are the fixture's).
  void StartNode(storage::TieredStoreOptions tiers, DataStreamServerOptions options = {}) {
    server_.reset();
    store_ = storage::TieredStore::Create(std::move(tiers)).value();
    options.store = store_.get();
    options.clock = &clock_;
    server_ = DataStreamServer::Create(options).value();
  }

  std::unique_ptr<DataStreamClient> Client() {
    return DataStreamClient::Connect(
               {.address = server_->address(), .timeout = std::chrono::seconds(10)})
        .value();
  }

  // A put ticket for `blocks`, and their payloads for the client's Put.
  TransferTicket OpenPut(const std::vector<storage::testing::TestBlock>& blocks) {
    std::vector<storage::BlockHeader> headers;
    for (const storage::testing::TestBlock& b : blocks) headers.push_back(b.header);
    return server_->OpenPut(std::move(headers)).value();
  }
  static std::vector<std::span<const uint8_t>> Payloads(
      const std::vector<storage::testing::TestBlock>& blocks) {
    std::vector<std::span<const uint8_t>> out;
    for (const storage::testing::TestBlock& b : blocks) out.emplace_back(b.payload);
    return out;
  }

  // Waits (bounded) until the server holds no staging and no open ticket.
  bool Drained() {
    return kvtier::testing::WaitUntil([&] {
      const DataStreamStats stats = server_->Stats();
      return stats.staged_bytes == 0 && stats.tickets_open == 0;
    });
  }

  FakeClock clock_;  // the stream's: ticket and session expiry
  std::unique_ptr<storage::TieredStore> store_;
  std::unique_ptr<DataStreamServer> server_;
};

}  // namespace kvtier::store
