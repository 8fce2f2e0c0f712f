# kvtier RPC schema: block reads and writes between nodes (storage nodes and workers).
# Evolution rules: see common.capnp.
#
# Control always travels here. Bulk bytes travel either inline (BlockPayload.data) or on
# the node's data stream (NodeInfo.dataAddress) named by a transfer ticket; the bulk path
# is chosen by measurement (docs/benchmarks.md).
@0x9157940ce8f084d1;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kvtier::rpc::schema");

using Common = import "common.capnp";

struct BlockHeader {
  # Travels and is stored with every block (storage/block_header.h); a block is never
  # served for another format or salt.
  key @0 :Common.BlockKey;
  layout @1 :Common.KvLayout;   # unused: superseded by formatTag
  modelTag @2 :Text;            # unused: superseded by formatTag
  quantization @3 :Text;        # unused: superseded by formatTag
  saltScope @4 :UInt64;         # a hash of the tenant's salt, never the salt itself
  checksum @5 :UInt64;          # XXH3-64 of the payload
  priority @6 :UInt8;
  retentionExpiryMs @7 :UInt64; # unused: superseded by retentionLeftMs
  payloadBytes @8 :UInt64;
  formatTag @9 :Text;           # layout fingerprint, model and quantization, e.g. "L32/H8/D128/T16/bf16/W0/S0|f..."
  parent @10 :Common.BlockKey;
  firstInChain @11 :Bool;       # the prompt's first block: `parent` is the salt root
  retentionLeftMs @12 :UInt64;  # how long `priority` still holds; 0: it does not expire
}

struct BlockPayload {
  header @0 :BlockHeader;
  data @1 :Data;                # empty when the bytes travel on the data stream
}

enum BlockState {
  present @0;
  missing @1;
  corrupt @2;                   # checksum mismatch: deleted, reported as DATA_LOSS
}

struct TransferTicket {
  # One transfer on the node's data stream (services/store/stream/protocol.h): good once,
  # for seconds; `secret` is the stream's only credential.
  id @0 :UInt64;
  dataAddress @1 :Text;         # host:port of the node's data stream
  totalBytes @2 :UInt64;        # put: exactly; get: at most (blocks may leave meanwhile)
  secret @3 :UInt64;
}

interface BlockStore {
  # One per tenant session. Every block is read and written under the session's salt
  # scope: a `saltScope` argument or header field that names another scope is refused
  # with PERMISSION_DENIED (0 means "the session's").

  put @0 (blocks :List(BlockPayload)) -> (stored :UInt32);
  # Stores a batch. INVALID_ARGUMENT for a header that disagrees with its payload (size or
  # checksum) or names no format, nothing of that batch stored; RESOURCE_EXHAUSTED when
  # a block is larger than the tiers. `stored`: blocks now held (new or refreshed).

  get @1 (keys :List(Common.BlockKey), layout :Common.KvLayout, saltScope :UInt64, formatTag :Text)
      -> (blocks :List(BlockPayload), states :List(BlockState));
  # blocks[i] and states[i] answer keys[i], looked up under `formatTag` (`layout` is
  # unused) and the session's salt scope; blocks[i] is empty unless states[i] is
  # `present` (a `corrupt` block failed its checksum and was deleted: DATA_LOSS).

  contains @2 (keys :List(Common.BlockKey), saltScope :UInt64, formatTag :Text) -> (present :List(Bool));

  remove @3 (keys :List(Common.BlockKey), saltScope :UInt64, formatTag :Text) -> (removed :UInt32);

  openPut @4 (headers :List(BlockHeader)) -> (ticket :TransferTicket);
  # Bulk put: the caller then writes the payloads, in header order, on the data stream;
  # the node checks each against its header and stores the batch only when all pass.
  # Errors as put, at open for the headers and on the stream for the payloads;
  # RESOURCE_EXHAUSTED when the node's staging for transfers in flight is full (retry).
  # UNIMPLEMENTED when the node runs no data stream (TLS on, or turned off): use put.

  openGet @5 (keys :List(Common.BlockKey), layout :Common.KvLayout, saltScope :UInt64, formatTag :Text)
      -> (ticket :TransferTicket, headers :List(BlockHeader), states :List(BlockState));
  # Bulk get: headers[i]/states[i] answer keys[i] as get does; the node has staged the
  # present blocks' bytes, which the caller then reads from the data stream (later
  # evictions do not change them). Checksums are the caller's to verify.
  # RESOURCE_EXHAUSTED and UNIMPLEMENTED as openPut.

  openGetSession @6 (layout :Common.KvLayout, saltScope :UInt64, formatTag :Text) -> (ticket :TransferTicket);
  # A get session: the caller then names each get's keys on the data stream itself
  # (keyed gets, services/store/stream/protocol.h), with no openGet per get; each answers
  # as openGet, the headers of the blocks sent included, under `formatTag` and the
  # session's salt scope. The session lives while used at least once per ticket ttl.
  # On a node that also serves a worker's pool, a block the tiers lack is read from the
  # pool (the tiers' copy wins). UNIMPLEMENTED as openPut.

  openPutSession @7 (saltScope :UInt64) -> (ticket :TransferTicket);
  # A put session: the caller then sends each put's headers on the data stream itself
  # (keyed puts, services/store/stream/protocol.h), with no openPut per put; each is
  # checked and stored as openPut's. A header's salt scope 0 is the session's; another
  # is refused unless the session holds a node credential (as put's headers). The
  # session lives while used at least once per ticket ttl. UNIMPLEMENTED as openPut.
}
