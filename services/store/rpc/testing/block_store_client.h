// Test helper: a tenant's connection to a node's BlockStore capability, with the calls the
// store tests make (put and get inline and over the data stream) returning Status instead
// of throwing. Blocks are storage/testing/blocks.h's MakeBlock blocks (key hi 0x1234).
//
// Thread safety: none; one thread makes the connection and every call on it (Cap'n
// Proto's EzRpcClient runs its event loop on the thread that made it).
#pragma once

#include <capnp/ez-rpc.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "services/rpc/schema/kvtier.capnp.h"
#include "services/rpc/status_mapping.h"
#include "services/store/rpc/block_header_wire.h"
#include "services/store/stream/data_stream_client.h"
#include "storage/testing/blocks.h"

namespace kvtier::store::testing {

namespace schema = kvtier::rpc::schema;
using storage::testing::TestBlock;

// Keys of MakeBlock's blocks `ids`.
inline constexpr uint64_t kKeyHi = 0x1234;  // block id's key: (kKeyHi, id), as MakeBlock's
inline void SetKeys(capnp::List<schema::BlockKey>::Builder keys, const std::vector<uint64_t>& ids) {
  for (unsigned i = 0; i < ids.size(); ++i) {
    keys[i].setHi(kKeyHi);
    keys[i].setLo(ids[i]);
  }
}

// One tenant's connection and its BlockStore capability.
class BlockStoreClient {
 public:
  BlockStoreClient(const std::string& address, const std::string& token)
      : client_(address), store_(Connect(token)) {}

  template <typename Params, typename Results>
  Result<capnp::Response<Results>> Call(capnp::Request<Params, Results> request) {
    try {
      return request.send().wait(client_.getWaitScope());
    } catch (const kj::Exception& e) {
      return rpc::ExceptionToStatus(e);
    }
  }
  schema::BlockStore::Client& store() { return store_; }

  Result<uint32_t> Put(const std::vector<TestBlock>& blocks) {
    auto request = store_.putRequest();
    auto list = request.initBlocks(static_cast<unsigned>(blocks.size()));
    for (unsigned i = 0; i < blocks.size(); ++i) {
      storage::BlockHeader header = blocks[i].header;
      header.salt_scope = 0;  // none named: the session's
      ToWire(header, list[i].initHeader());
      list[i].setData(kj::arrayPtr(blocks[i].payload.data(), blocks[i].payload.size()));
    }
    auto response = Call(kj::mv(request));
    if (!response.ok()) return response.status();
    return response->getStored();
  }

  // "present"/"missing"/"corrupt" per key, and the bytes of those present; every present
  // block's checksum verified (kDataLoss where one does not match).
  Result<std::vector<std::pair<std::string, std::vector<uint8_t>>>> Get(
      const std::vector<uint64_t>& ids, const std::string& format) {
    auto request = store_.getRequest();
    SetKeys(request.initKeys(static_cast<unsigned>(ids.size())), ids);
    request.setFormatTag(format);
    auto response = Call(kj::mv(request));
    if (!response.ok()) return response.status();
    std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
    for (unsigned i = 0; i < ids.size(); ++i) {
      const auto state = response->getStates()[i];
      const auto data = response->getBlocks()[i].getData();
      if (state == schema::BlockState::PRESENT &&
          storage::PayloadChecksum({data.begin(), data.size()}) !=
              response->getBlocks()[i].getHeader().getChecksum()) {
        return DataLossError("block " + std::to_string(ids[i]) +
                             " does not match its header's checksum");
      }
      out.emplace_back(state == schema::BlockState::PRESENT   ? "present"
                       : state == schema::BlockState::CORRUPT ? "corrupt"
                                                              : "missing",
                       std::vector<uint8_t>(data.begin(), data.end()));
    }
    return out;
  }

  // Put through openPut and the data stream.
  Result<uint32_t> StreamPut(const std::vector<TestBlock>& blocks) {
    auto request = store_.openPutRequest();
    auto headers = request.initHeaders(static_cast<unsigned>(blocks.size()));
    std::vector<std::span<const uint8_t>> payloads;
    for (unsigned i = 0; i < blocks.size(); ++i) {
      storage::BlockHeader header = blocks[i].header;
      header.salt_scope = 0;
      ToWire(header, headers[i]);
      payloads.emplace_back(blocks[i].payload);
    }
    auto response = Call(kj::mv(request));
    if (!response.ok()) return response.status();
    const TransferTicket ticket = FromWire(response->getTicket());
    KVTIER_ASSIGN_OR_RETURN(auto stream,
                            DataStreamClient::Connect({.address = ticket.data_address}));
    return stream->Put(ticket, payloads);
  }

  // Put through a put session and a keyed put on the data stream; each header names
  // `salt_scope` (0: the session's).
  Result<uint32_t> KeyedPut(const std::vector<TestBlock>& blocks, uint64_t salt_scope = 0) {
    auto request = store_.openPutSessionRequest();
    request.setSaltScope(salt_scope);
    auto response = Call(kj::mv(request));
    if (!response.ok()) return response.status();
    const TransferTicket session = FromWire(response->getTicket());
    std::vector<storage::BlockHeader> headers;
    std::vector<std::span<const uint8_t>> payloads;
    for (const TestBlock& block : blocks) {
      headers.push_back(block.header);
      headers.back().salt_scope = salt_scope;
      payloads.emplace_back(block.payload);
    }
    KVTIER_ASSIGN_OR_RETURN(auto stream,
                            DataStreamClient::Connect({.address = session.data_address}));
    return stream->PutBlocks(session, headers, payloads);
  }

  // Get through openGet and the data stream, as Get answers; every checksum verified.
  Result<std::vector<std::pair<std::string, std::vector<uint8_t>>>> StreamGet(
      const std::vector<uint64_t>& ids, const std::string& format) {
    auto request = store_.openGetRequest();
    SetKeys(request.initKeys(static_cast<unsigned>(ids.size())), ids);
    request.setFormatTag(format);
    auto response = Call(kj::mv(request));
    if (!response.ok()) return response.status();
    std::vector<std::vector<uint8_t>> buffers;
    for (auto header : response->getHeaders()) buffers.emplace_back(header.getPayloadBytes());
    const TransferTicket ticket = FromWire(response->getTicket());
    KVTIER_ASSIGN_OR_RETURN(auto stream,
                            DataStreamClient::Connect({.address = ticket.data_address}));
    KVTIER_ASSIGN_OR_RETURN(auto states, stream->Get(ticket, std::vector<std::span<uint8_t>>(
                                                                 buffers.begin(), buffers.end())));
    return Answer(ids, buffers, [&](size_t i) -> std::optional<uint64_t> {
      const bool present =
          states[i] == StreamBlockState::kPresent &&
          response->getStates()[static_cast<unsigned>(i)] == schema::BlockState::PRESENT;
      if (!present) return std::nullopt;
      return response->getHeaders()[static_cast<unsigned>(i)].getChecksum();
    });
  }

  // Get through a get session and a keyed get on the data stream, as Get answers; every
  // checksum verified.
  Result<std::vector<std::pair<std::string, std::vector<uint8_t>>>> KeyedGet(
      const std::vector<uint64_t>& ids, const std::string& format, uint64_t salt_scope = 0) {
    auto request = store_.openGetSessionRequest();
    request.setFormatTag(format);
    request.setSaltScope(salt_scope);
    auto response = Call(kj::mv(request));
    if (!response.ok()) return response.status();
    const TransferTicket session = FromWire(response->getTicket());
    KVTIER_ASSIGN_OR_RETURN(auto stream,
                            DataStreamClient::Connect({.address = session.data_address}));
    std::vector<BlockKey> keys;
    for (uint64_t id : ids) keys.push_back({kKeyHi, id});
    std::vector<std::vector<uint8_t>> buffers(ids.size());
    KVTIER_ASSIGN_OR_RETURN(
        auto got, stream->GetKeys(session, keys, [&](size_t i, const storage::BlockHeader& h) {
          buffers[i].resize(h.payload_bytes);
          return std::span<uint8_t>(buffers[i]);
        }));
    return Answer(ids, buffers, [&](size_t i) -> std::optional<uint64_t> {
      if (got.states[i] != StreamBlockState::kPresent) return std::nullopt;
      return got.headers[i]->checksum;
    });
  }

 private:
  // A streamed get's answer as Get gives it: "present" with the bytes where `checksum_of(i)`
  // names the present block's checksum (kDataLoss where they do not match), else "missing".
  template <typename ChecksumOf>
  static Result<std::vector<std::pair<std::string, std::vector<uint8_t>>>> Answer(
      const std::vector<uint64_t>& ids, const std::vector<std::vector<uint8_t>>& buffers,
      ChecksumOf checksum_of) {
    std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::optional<uint64_t> checksum = checksum_of(i);
      if (checksum && storage::PayloadChecksum(buffers[i]) != *checksum) {
        return DataLossError("block " + std::to_string(ids[i]) + " does not match its checksum");
      }
      out.emplace_back(checksum ? "present" : "missing",
                       checksum ? buffers[i] : std::vector<uint8_t>{});
    }
    return out;
  }

  schema::BlockStore::Client Connect(const std::string& token) {
    auto auth = client_.getMain<schema::Bootstrap>().authenticateRequest();
    auth.setToken(token);
    auto session = auth.send().wait(client_.getWaitScope()).getSession();
    return session.storeRequest().send().wait(client_.getWaitScope()).getStore();
  }
  capnp::EzRpcClient client_;
  schema::BlockStore::Client store_;
};

}  // namespace kvtier::store::testing
