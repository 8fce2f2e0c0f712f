// A client that guesses data-stream tickets and sessions of a running `kvtier store`
// never takes them from their owner. Ids are random, so neighbours of the guesser's own
// ids are nobody's; and even the exact id of another client's ticket, with a wrong
// secret, is refused without withdrawing it. The owner waits before it uses its tickets
// (the window in which sequential ids once let a guesser cancel 19 of 20 transfers).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "services/store/rpc/testing/block_store_client.h"
#include "services/store/rpc/testing/store_process.h"
#include "storage/testing/blocks.h"
#include "tests/testing/test_util.h"

namespace kvtier::store {
namespace {

using storage::testing::MakeBlock;
using storage::testing::TestBlock;
using testing::BlockStoreClient;

constexpr uint64_t kBlockBytes = 16 * 1024;
constexpr int kTickets = 20;

Result<TransferTicket> OpenPut(BlockStoreClient& client, const TestBlock& block) {
  auto request = client.store().openPutRequest();
  storage::BlockHeader header = block.header;
  header.salt_scope = 0;  // the session's
  ToWire(header, request.initHeaders(1)[0]);
  auto response = client.Call(kj::mv(request));
  if (!response.ok()) return response.status();
  return FromWire(response->getTicket());
}

Result<TransferTicket> OpenGetSession(BlockStoreClient& client) {
  auto request = client.store().openGetSessionRequest();
  request.setFormatTag(storage::testing::kFormat);
  auto response = client.Call(kj::mv(request));
  if (!response.ok()) return response.status();
  return FromWire(response->getTicket());
}

// A put under `ticket` on a connection of its own (a refusal closes the connection).
Result<uint32_t> PutOnce(const TransferTicket& ticket, const TestBlock& block) {
  KVTIER_ASSIGN_OR_RETURN(auto stream, DataStreamClient::Connect({.address = ticket.data_address}));
  const std::span<const uint8_t> payloads[] = {block.payload};
  return stream->Put(ticket, payloads);
}

// A keyed get of block `id` under `session` on a connection of its own: its bytes.
Result<std::vector<uint8_t>> GetOnce(const TransferTicket& session, uint64_t id) {
  KVTIER_ASSIGN_OR_RETURN(auto stream,
                          DataStreamClient::Connect({.address = session.data_address}));
  const BlockKey keys[] = {{testing::kKeyHi, id}};
  std::vector<uint8_t> bytes;
  KVTIER_ASSIGN_OR_RETURN(
      const auto got, stream->GetKeys(session, keys, [&](size_t, const storage::BlockHeader& h) {
        bytes.resize(h.payload_bytes);
        return std::span<uint8_t>(bytes);
      }));
  if (got.states[0] != StreamBlockState::kPresent)
    return NotFoundError("block " + std::to_string(id) + " absent");
  return bytes;
}

TEST(StoreTicketGuessTest, GuessedTicketsAndSessionsNeverCostTheirOwner) {
  ::kvtier::testing::TempDir dir;
  testing::StoreProcess store(
      {"--data-dir", dir.File("data"), "--store-host-cache-bytes", std::to_string(16 << 20),
       "--store-disk-bytes", "0", "--store-data-port", "0"},
      dir.path());
  const std::string address = store.WaitForAddress();
  ASSERT_FALSE(address.empty()) << store.process().Stdout() << store.process().Stderr();
  BlockStoreClient owner(address, "owner");
  BlockStoreClient guesser(address, "guesser");

  // The guesser's own ticket, opened just before the owner's: sequential ids would make the
  // owner's the next ones.
  const Result<TransferTicket> own = OpenPut(guesser, MakeBlock(999, kBlockBytes));
  ASSERT_TRUE(own.ok()) << own.status();
  std::vector<TestBlock> blocks;
  std::vector<TransferTicket> tickets;
  for (int i = 1; i <= kTickets; ++i) {
    blocks.push_back(MakeBlock(static_cast<uint64_t>(i), kBlockBytes));
    const Result<TransferTicket> ticket = OpenPut(owner, blocks.back());
    ASSERT_TRUE(ticket.ok()) << ticket.status();
    tickets.push_back(*ticket);
  }
  for (uint64_t delta = 1; delta <= kTickets; ++delta) {
    for (const uint64_t id : {own->id + delta, own->id - delta}) {
      TransferTicket guess = *own;
      guess.id = id;
      EXPECT_EQ(PutOnce(guess, blocks[0]).status().code(), StatusCode::kNotFound)
          << "id " << id << " is someone's";
    }
  }
  // Even the exact ids, with a wrong secret.
  for (int i = 0; i < kTickets; ++i) {
    TransferTicket guess = tickets[i];
    guess.secret ^= 0x5a5a5a5a5a5a5a5aull;
    const Result<uint32_t> refused = PutOnce(guess, MakeBlock(5000 + i, kBlockBytes));
    EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (int i = 0; i < kTickets; ++i) {
    const Result<uint32_t> stored = PutOnce(tickets[i], blocks[i]);
    ASSERT_TRUE(stored.ok()) << "ticket " << i << ": " << stored.status();
    EXPECT_EQ(*stored, 1u);
  }

  // A get session likewise: a wrong secret for its id is refused, and the owner reads on.
  const Result<TransferTicket> session = OpenGetSession(owner);
  ASSERT_TRUE(session.ok()) << session.status();
  TransferTicket guess = *session;
  guess.secret += 1;
  EXPECT_EQ(GetOnce(guess, 1).status().code(), StatusCode::kPermissionDenied);
  for (int i = 0; i < kTickets; ++i) {
    const Result<std::vector<uint8_t>> bytes = GetOnce(*session, blocks[i].header.key.lo);
    ASSERT_TRUE(bytes.ok()) << "block " << i << ": " << bytes.status();
    EXPECT_EQ(*bytes, blocks[i].payload) << "block " << i;
  }
}

}  // namespace
}  // namespace kvtier::store
