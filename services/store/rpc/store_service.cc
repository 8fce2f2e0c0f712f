#include "services/store/rpc/store_service.h"

#include <algorithm>
#include <memory>

#include "common/block_key.h"
#include "services/rpc/schema/store.capnp.h"
#include "services/rpc/schema_convert.h"
#include "services/rpc/status_mapping.h"
#include "services/store/rpc/block_header_wire.h"
#include "services/store/rpc/loop_bound_block_source.h"

namespace kvtier::store {
namespace {

namespace schema = kvtier::rpc::schema;
using rpc::ThrowIfError;

std::span<const uint8_t> Bytes(capnp::Data::Reader data) { return {data.begin(), data.size()}; }

class BlockStoreServer final : public schema::BlockStore::Server {
 public:
  BlockStoreServer(const BlockStoreServiceOptions& options, const auth::Tenant& tenant)
      : store_(*options.store),
        extra_(options.extra),
        stream_(options.stream),
        on_request_(options.on_request),
        scope_(SaltScope(tenant.salt)),
        node_(tenant.node),
        salt_(tenant.salt),
        limits_(options.limits) {}

 protected:
  kj::Promise<void> put(PutContext call) override {
    auto blocks = call.getParams().getBlocks();
    CheckCount(blocks.size());
    std::vector<storage::PutItem> items;
    items.reserve(blocks.size());
    for (unsigned i = 0; i < blocks.size(); ++i) {
      const uint64_t scope = ScopeFor(blocks[i].getHeader().getSaltScope());
      Result<storage::BlockHeader> header = Salted(FromWire(blocks[i].getHeader(), scope));
      ThrowIfError(header.status().WithContext("block " + std::to_string(i)));
      storage::PutItem item{std::move(*header), Bytes(blocks[i].getData())};
      // Every block is checked before any is stored: a bad one refuses the whole batch.
      ThrowIfError(storage::ValidateBlock(item.header, item.payload, limits_.max_block_bytes)
                       .WithContext("block " + std::to_string(i)));
      item.checksum_checked = true;  // the tier need not hash it again
      items.push_back(std::move(item));
    }
    if (on_request_) {
      std::vector<BlockKey> keys;
      keys.reserve(items.size());
      for (const storage::PutItem& item : items) keys.push_back(item.header.key);
      on_request_(keys);
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
    const uint64_t scope = ScopeFor(p.getSaltScope());
    const std::string format = p.getFormatTag().cStr();
    const std::vector<BlockKey> named = rpc::ToKeys(p.getKeys());
    const std::vector<BlockKey> keys = salt_.Apply(named);
    if (on_request_) on_request_(keys);
    auto results = call.getResults();
    auto blocks = results.initBlocks(static_cast<unsigned>(keys.size()));
    auto states = results.initStates(static_cast<unsigned>(keys.size()));
    ExtraReads extra;  // blocks the tiers lack, read from the extra source in one batch
    for (unsigned i = 0; i < keys.size(); ++i) {
      const storage::BlockRef ref{keys[i], format, scope};
      states.set(i, schema::BlockState::MISSING);
      // The size first, so that the payload is read straight into the response.
      if (Result<storage::BlockHeader> peeked = store_.Peek(ref); peeked.ok()) {
        auto data = blocks[i].initData(static_cast<unsigned>(peeked->payload_bytes));
        Result<storage::TieredHit> read =
            store_.Get(ref, std::span<uint8_t>(data.begin(), data.size()));
        if (read.ok()) {
          ToWire(As(named[i], std::move(read->header)), blocks[i].initHeader());
          states.set(i, schema::BlockState::PRESENT);
          continue;
        }
        blocks[i].initData(0);
        if (read.status().code() == StatusCode::kDataLoss) {
          states.set(i, schema::BlockState::CORRUPT);
          continue;
        }
        if (read.status().code() != StatusCode::kNotFound) ThrowIfError(read.status());
      }
      if (extra_ != nullptr) PeekExtra(ref, blocks[i], i, extra);
    }
    ReadExtra(extra, named, blocks, states);
    return kj::READY_NOW;
  }

  kj::Promise<void> contains(ContainsContext call) override {
    const auto p = call.getParams();
    CheckCount(p.getKeys().size());
    const uint64_t scope = ScopeFor(p.getSaltScope());
    const std::string format = p.getFormatTag().cStr();
    auto present = call.getResults().initPresent(p.getKeys().size());
    const std::vector<BlockKey> keys = salt_.Apply(rpc::ToKeys(p.getKeys()));
    if (on_request_) on_request_(keys);
    unsigned i = 0;
    for (const BlockKey& key : keys) {
      const storage::BlockRef ref{key, format, scope};
      present.set(i++, store_.Contains(ref) || (extra_ != nullptr && extra_->Peek(ref).ok()));
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> remove(RemoveContext call) override {
    const auto p = call.getParams();
    CheckCount(p.getKeys().size());
    const uint64_t scope = ScopeFor(p.getSaltScope());
    const std::string format = p.getFormatTag().cStr();
    uint32_t removed = 0;
    for (const BlockKey& key : salt_.Apply(rpc::ToKeys(p.getKeys())))
      removed += store_.Remove({key, format, scope}).ok();
    call.getResults().setRemoved(removed);
    return kj::READY_NOW;
  }

  kj::Promise<void> openPut(OpenPutContext call) override {
    auto headers = call.getParams().getHeaders();
    CheckCount(headers.size());
    std::vector<storage::BlockHeader> converted;
    converted.reserve(headers.size());
    for (auto h : headers)
      converted.push_back(rpc::ValueOrThrow(Salted(FromWire(h, ScopeFor(h.getSaltScope())))));
    if (on_request_) {
      std::vector<BlockKey> keys;
      keys.reserve(converted.size());
      for (const storage::BlockHeader& header : converted) keys.push_back(header.key);
      on_request_(keys);
    }
    const TransferTicket ticket = rpc::ValueOrThrow(Stream().OpenPut(std::move(converted)));
    ToWire(ticket, call.getResults().initTicket());
    return kj::READY_NOW;
  }

  kj::Promise<void> openGet(OpenGetContext call) override {
    const auto p = call.getParams();
    CheckCount(p.getKeys().size());
    const uint64_t scope = ScopeFor(p.getSaltScope());
    const std::vector<BlockKey> named = rpc::ToKeys(p.getKeys());
    const std::vector<BlockKey> keys = salt_.Apply(named);
    if (on_request_) on_request_(keys);
    const StreamGetOpened opened =
        rpc::ValueOrThrow(Stream().OpenGet(keys, p.getFormatTag().cStr(), scope, extra_));
    auto results = call.getResults();
    ToWire(opened.ticket, results.initTicket());
    auto headers = results.initHeaders(static_cast<unsigned>(keys.size()));
    auto states = results.initStates(static_cast<unsigned>(keys.size()));
    for (unsigned i = 0; i < keys.size(); ++i) {
      states.set(i, opened.states[i] == StreamBlockState::kPresent   ? schema::BlockState::PRESENT
                    : opened.states[i] == StreamBlockState::kCorrupt ? schema::BlockState::CORRUPT
                                                                     : schema::BlockState::MISSING);
      if (opened.headers[i]) ToWire(As(named[i], *opened.headers[i]), headers[i]);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> openGetSession(OpenGetSessionContext call) override {
    const auto p = call.getParams();
    const uint64_t scope = ScopeFor(p.getSaltScope());
    DataStreamServer& stream = Stream();
    const TransferTicket ticket =
        rpc::ValueOrThrow(stream.OpenSession({.op = StreamOp::kGetKeys,
                                              .format_tag = p.getFormatTag().cStr(),
                                              .salt_scope = scope,
                                              .any_scope = node_,
                                              .salt = salt_,
                                              .max_blocks = MaxBlocksPerTransfer(),
                                              .on_request = on_request_,
                                              .extra = BoundExtra()}));
    ToWire(ticket, call.getResults().initTicket());
    return kj::READY_NOW;
  }

  kj::Promise<void> openPutSession(OpenPutSessionContext call) override {
    const uint64_t scope = ScopeFor(call.getParams().getSaltScope());
    // A node session names each header's scope, as in put; a tenant's stays in its own.
    const TransferTicket ticket =
        rpc::ValueOrThrow(Stream().OpenSession({.op = StreamOp::kPutHeaders,
                                                .salt_scope = scope,
                                                .any_scope = node_,
                                                .salt = salt_,
                                                .max_blocks = MaxBlocksPerTransfer(),
                                                .on_request = on_request_}));
    ToWire(ticket, call.getResults().initTicket());
    return kj::READY_NOW;
  }

 private:
  void CheckCount(size_t count) const {
    if (count > limits_.max_blocks_per_call) {
      rpc::ThrowStatus(InvalidArgumentError(std::to_string(count) +
                                            " blocks in one call; at most " +
                                            std::to_string(limits_.max_blocks_per_call)));
    }
  }
  // A tenant's header in its key space (common/block_key.h KeySalt): key and parent.
  Result<storage::BlockHeader> Salted(Result<storage::BlockHeader> header) const {
    if (header.ok()) storage::SaltHeader(salt_, *header);
    return header;
  }
  // A stored header as the client sees it: under the key it named.
  static storage::BlockHeader As(const BlockKey& named, storage::BlockHeader header) {
    header.key = named;
    return header;
  }
  // A keyed transfer carries as many blocks as a call may.
  uint32_t MaxBlocksPerTransfer() const {
    return std::min(limits_.max_blocks_per_call, kMaxStreamKeys);
  }
  // The scope a request works under: the session's own when it names none (0); another
  // only for a node session (a tenant naming one is refused).
  uint64_t ScopeFor(uint64_t requested) const {
    if (requested == 0) return scope_;
    if (node_) return requested;
    if (requested != scope_) {
      rpc::ThrowStatus(PermissionDeniedError("salt scope " + std::to_string(requested) +
                                             " is not this session's"));
    }
    return scope_;
  }

  // The extra source for the stream's keyed gets, read on this capability's loop from
  // the stream's threads (null: none). Bound once, on the loop, at the first session.
  std::shared_ptr<ExtraBlockSource> BoundExtra() {
    if (extra_ != nullptr && bound_extra_ == nullptr) {
      bound_extra_ = rpc::ValueOrThrow(LoopBoundBlockSource::Create(extra_));
    }
    return bound_extra_;
  }

  DataStreamServer& Stream() const {
    if (stream_ == nullptr) {
      rpc::ThrowStatus(UnimplementedError(
          "this node runs no data stream (TLS is on, or it is turned off); use put/get"));
    }
    return *stream_;
  }

  // Blocks the tiers lack, from the node's other holdings (a worker's pool): each is sized
  // by a Peek and given its place in the response, then all are read in one batch (one
  // gather on a GPU pool, where a read per block is a copy per block).
  struct ExtraReads {
    std::vector<unsigned> positions;
    std::vector<storage::BlockRef> refs;
    std::vector<std::span<uint8_t>> outs;
  };
  void PeekExtra(const storage::BlockRef& ref, schema::BlockPayload::Builder block, unsigned i,
                 ExtraReads& extra) {
    Result<storage::BlockHeader> peeked = extra_->Peek(ref);
    if (!peeked.ok()) return;
    auto data = block.initData(static_cast<unsigned>(peeked->payload_bytes));
    extra.positions.push_back(i);
    extra.refs.push_back(ref);
    extra.outs.emplace_back(data.begin(), data.size());
  }
  void ReadExtra(const ExtraReads& extra, std::span<const BlockKey> named,
                 capnp::List<schema::BlockPayload>::Builder blocks,
                 capnp::List<schema::BlockState>::Builder states) {
    if (extra.refs.empty()) return;
    std::vector<Result<storage::BlockHeader>> reads = extra_->ReadBatch(extra.refs, extra.outs);
    for (size_t k = 0; k < reads.size(); ++k) {
      const unsigned i = extra.positions[k];
      if (!reads[k].ok()) {
        blocks[i].initData(0);
        if (reads[k].status().code() != StatusCode::kNotFound) ThrowIfError(reads[k].status());
        continue;
      }
      ToWire(As(named[i], WithChecksum(std::move(*reads[k]), extra.outs[k])),
             blocks[i].initHeader());
      states.set(i, schema::BlockState::PRESENT);
    }
  }

  storage::TieredStore& store_;
  ExtraBlockSource* const extra_;
  std::shared_ptr<ExtraBlockSource> bound_extra_;  // BoundExtra()
  DataStreamServer* const stream_;
  const std::function<void(std::span<const BlockKey>)> on_request_;
  const uint64_t scope_;
  const bool node_;
  const KeySalt salt_;  // a tenant's key space; a node's keys are already in it
  const StoreServiceLimits limits_;
};

}  // namespace

kj::Own<capnp::Capability::Server> MakeBlockStoreService(const BlockStoreServiceOptions& options,
                                                         const auth::Tenant& tenant) {
  return kj::heap<BlockStoreServer>(options, tenant);
}

}  // namespace kvtier::store
