# kvtier RPC schema: types shared by every service.
#
# SCHEMA EVOLUTION RULES (for every file in services/rpc/schema/)
#  1. Never change the type, ordinal (@N) or meaning of an existing field, method or
#     enumerant. Renaming is allowed (names are not on the wire); reusing is not.
#  2. Add fields and methods only with the next free ordinal. Old peers ignore unknown
#     fields and answer unknown methods with UNIMPLEMENTED: callers must handle that.
#  3. A new field's zero value must mean "the old behaviour" (Cap'n Proto defaults
#     absent fields to zero / false / empty / the first enumerant).
#  4. Never add an enumerant in front of existing ones; append. Readers map unknown
#     enumerants to an error, never to a guess.
#  5. A union may gain members at the end; a plain field cannot become a union member.
#  6. An incompatible change is a new method (fooV2 @N) or a new interface, kept side by
#     side with the old one for one release; schemaVersion in ServerInfo counts breaking
#     removals only.
#  7. Sizes are explicit: lengths are UInt32, byte counts and sequence numbers UInt64,
#     durations are milliseconds in UInt64 named *Ms.
@0x8a7729d01164bba4;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kvtier::rpc::schema");

struct BlockKey {
  # 128-bit chained block key (common/block_key.h). Top bit of hi set: opaque key.
  hi @0 :UInt64;
  lo @1 :UInt64;
}

enum Tier {
  gpu @0;
  host @1;
  disk @2;
}

struct Location {
  # Where a copy of a block lives.
  nodeId @0 :Text;
  tier @1 :Tier;
  poolId @2 :UInt32;   # the pool on that node (one per attention window x KV heads)
}

enum Dtype {
  fp32 @0;
  fp16 @1;
  bf16 @2;
  fp8E4m3 @3;
  int8 @4;
  int4 @5;  # two values a byte; int8, int4 and fp8E4m3 carry per-token scales (kv_layout.h)
}

struct KvLayout {
  # common/kv_layout.h. Blocks move between two nodes only when their layouts are equal.
  numLayers @0 :UInt32;
  numKvHeads @1 :UInt32;
  headDim @2 :UInt32;
  tokensPerBlock @3 :UInt32;
  dtype @4 :Dtype;
  attentionWindow @5 :UInt32;   # 0: full attention
  sinkTokens @6 :UInt32;
}

struct RetentionRange {
  # TensorRT-LLM retention semantics: prompt tokens [firstToken, lastToken) get `priority`
  # (0-100) for `durationMs` (0: no expiry); afterwards their priority reverts to 35.
  firstToken @0 :UInt32;
  lastToken @1 :UInt32;    # exclusive; 0 means "to the end of the prompt"
  priority @2 :UInt8;
  durationMs @3 :UInt64;
}

struct RetentionConfig {
  ranges @0 :List(RetentionRange);
  decodePriority @1 :UInt8;        # for blocks of generated tokens; 0 in the message: 35
  decodeDurationMs @2 :UInt64;
}

struct ServerInfo {
  version @0 :Text;          # kvtier release, e.g. "0.1.0"
  schemaVersion @1 :UInt32;  # bumped only on a breaking removal (rule 6)
  roles @2 :List(Text);      # "coordinator", "worker", "store"
  nodeId @3 :Text;
}
