#include "services/store/rpc/store_service.h"

#include "common/block_key.h"
#include "services/rpc/schema/store.capnp.h"
#include "services/rpc/schema_convert.h"
#include "services/rpc/status_mapping.h"
#include "services/store/rpc/block_header_wire.h"

namespace kvtier::store {
namespace {

namespace schema = kvtier::rpc::schema;
using rpc::ThrowIfError;

std::span<const uint8_t> Bytes(capnp::Data::Reader data) { return {data.begin(), data.size()}; }

class BlockStoreServer final : public schema::BlockStore::Server {
 public:
  BlockStoreServer(storage::TieredStore& store, uint64_t scope, StoreServiceLimits limits)
      : store_(store), scope_(scope), limits_(limits) {}

 protected:
  kj::Promise<void> put(PutContext call) override {
    auto blocks = call.getParams().getBlocks();
    CheckCount(blocks.size());
    std::vector<storage::PutItem> items;
    items.reserve(blocks.size());
    for (unsigned i = 0; i < blocks.size(); ++i) {
      CheckScope(blocks[i].getHeader().getSaltScope());
      storage::PutItem item{FromWire(blocks[i].getHeader(), scope_), Bytes(blocks[i].getData())};
      // Every block is checked before any is stored: a bad one refuses the whole batch.
      ThrowIfError(storage::ValidateBlock(item.header, item.payload, limits_.max_block_bytes)
                       .WithContext("block " + std::to_string(i)));
      items.push_back(std::move(item));
    }
    uint32_t stored = 0;
    const std::vector<Status> results = store_.PutBatch(items);
    for (size_t i = 0; i < results.size(); ++i) {
      ThrowIfError(results[i].WithContext("block " + std::to_string(i)));
      ++stored;
    }
    call.getResults().setStored(stored);
    return kj::READY_NOW;
  }

  kj::Promise<void> get(GetContext call) override {
    const auto p = call.getParams();
    CheckCount(p.getKeys().size());
    CheckScope(p.getSaltScope());
    const std::string format = p.getFormatTag().cStr();
    const std::vector<BlockKey> keys = rpc::ToKeys(p.getKeys());
    auto results = call.getResults();
    auto blocks = results.initBlocks(static_cast<unsigned>(keys.size()));
    auto states = results.initStates(static_cast<unsigned>(keys.size()));
    for (unsigned i = 0; i < keys.size(); ++i) {
      const storage::BlockRef ref{keys[i], format, scope_};
      states.set(i, schema::BlockState::MISSING);
      // The size first, so that the payload is read straight into the response.
      Result<storage::BlockHeader> peeked = store_.Peek(ref);
      if (!peeked.ok()) continue;
      auto data = blocks[i].initData(static_cast<unsigned>(peeked->payload_bytes));
      Result<storage::TieredHit> read = store_.Get(ref, std::span<uint8_t>(data.begin(), data.size()));
      if (!read.ok()) {
        blocks[i].initData(0);
        if (read.status().code() == StatusCode::kDataLoss) states.set(i, schema::BlockState::CORRUPT);
        else if (read.status().code() != StatusCode::kNotFound) ThrowIfError(read.status());
        continue;
      }
      ToWire(read->header, blocks[i].initHeader());
      states.set(i, schema::BlockState::PRESENT);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> contains(ContainsContext call) override {
    const auto p = call.getParams();
    CheckCount(p.getKeys().size());
    CheckScope(p.getSaltScope());
    const std::string format = p.getFormatTag().cStr();
    auto present = call.getResults().initPresent(p.getKeys().size());
    unsigned i = 0;
    for (const BlockKey& key : rpc::ToKeys(p.getKeys())) present.set(i++, store_.Contains({key, format, scope_}));
    return kj::READY_NOW;
  }

  kj::Promise<void> remove(RemoveContext call) override {
    const auto p = call.getParams();
    CheckCount(p.getKeys().size());
    CheckScope(p.getSaltScope());
    const std::string format = p.getFormatTag().cStr();
    uint32_t removed = 0;
    for (const BlockKey& key : rpc::ToKeys(p.getKeys())) removed += store_.Remove({key, format, scope_}).ok();
    call.getResults().setRemoved(removed);
    return kj::READY_NOW;
  }

  kj::Promise<void> openPut(OpenPutContext) override {
    rpc::ThrowStatus(UnimplementedError("bulk transfer on the data stream is not built yet; use put"));
  }
  kj::Promise<void> openGet(OpenGetContext) override {
    rpc::ThrowStatus(UnimplementedError("bulk transfer on the data stream is not built yet; use get"));
  }

 private:
  void CheckCount(size_t count) const {
    if (count > limits_.max_blocks_per_call) {
      rpc::ThrowStatus(InvalidArgumentError(std::to_string(count) + " blocks in one call; at most " +
                                            std::to_string(limits_.max_blocks_per_call)));
    }
  }
  void CheckScope(uint64_t scope) const {
    if (scope != 0 && scope != scope_) {
      rpc::ThrowStatus(PermissionDeniedError("salt scope " + std::to_string(scope) + " is not this session's"));
    }
  }

  storage::TieredStore& store_;
  const uint64_t scope_;
  const StoreServiceLimits limits_;
};

}  // namespace

capnp::Capability::Client MakeBlockStoreService(storage::TieredStore& store, const auth::Tenant& tenant,
                                                StoreServiceLimits limits) {
  return kj::heap<BlockStoreServer>(store, SaltScope(tenant.salt), limits);
}

}  // namespace kvtier::store
