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
  # Travels and is stored with every block; a block is never served for another layout,
  # model or salt.
  key @0 :Common.BlockKey;
  layout @1 :Common.KvLayout;
  modelTag @2 :Text;
  quantization @3 :Text;        # "" (as the layout's dtype), "int8-per-token", "fp8-per-token"
  saltScope @4 :UInt64;         # a hash of the tenant's salt, never the salt itself
  checksum @5 :UInt64;          # XXH3-64 of the payload
  priority @6 :UInt8;
  retentionExpiryMs @7 :UInt64;
  payloadBytes @8 :UInt64;
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
  id @0 :UInt64;
  dataAddress @1 :Text;
  totalBytes @2 :UInt64;
}

interface BlockStore {
  put @0 (blocks :List(BlockPayload)) -> (stored :UInt32);
  # Stores a batch. INVALID_ARGUMENT for a header that disagrees with its payload (size or
  # checksum), nothing of that batch stored; RESOURCE_EXHAUSTED when the tiers are full.

  get @1 (keys :List(Common.BlockKey), layout :Common.KvLayout, saltScope :UInt64)
      -> (blocks :List(BlockPayload), states :List(BlockState));
  # Returns the blocks present under that layout and salt scope; states[i] says what
  # happened to keys[i].

  contains @2 (keys :List(Common.BlockKey), saltScope :UInt64) -> (present :List(Bool));

  remove @3 (keys :List(Common.BlockKey), saltScope :UInt64) -> (removed :UInt32);

  openPut @4 (headers :List(BlockHeader)) -> (ticket :TransferTicket);
  # Bulk put: the caller streams the payloads, in header order, on the data stream.

  openGet @5 (keys :List(Common.BlockKey), layout :Common.KvLayout, saltScope :UInt64)
      -> (ticket :TransferTicket, headers :List(BlockHeader), states :List(BlockState));
  # Bulk get: the caller reads the payloads of the present blocks from the data stream.
}
