# kvtier RPC schema: a worker node's block pools, for the inference processes on its node.
# Evolution rules: see common.capnp.
#
# Bytes never cross this interface: a process maps the pool (CUDA IPC or shared memory)
# once with attachPool, then moves blocks by id. Block ids are pool-relative.
@0xebb4683354dcaf99;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kvtier::rpc::schema");

using Common = import "common.capnp";

struct PoolAttachment {
  poolId @0 :UInt32;
  layout @1 :Common.KvLayout;
  numBlocks @2 :UInt32;
  blockStrideBytes @3 :UInt64;   # distance between consecutive blocks in the mapping
  mapping :union {
    cudaIpc @4 :Data;            # cudaIpcMemHandle_t (64 bytes) of the pool's device memory
    sharedMemory @5 :Text;       # POSIX shared-memory name (shm_open) of a host pool
  }
  deviceIndex @6 :Int32;         # CUDA device of a cudaIpc mapping; -1 for host pools
}

struct Allocation {
  blockIds @0 :List(UInt32);     # the sequence's block table in its first pool, in token order
  reusedBlocks @1 :UInt32;       # leading blocks found cached (their KV is already there)
  partialReuseTokens @2 :UInt32; # tokens of the next block reusable (copied on partial reuse)
  tables @3 :List(PoolTable);    # one per pool the sequence spans, as allocated
  struct PoolTable {
    poolId @0 :UInt32;
    blockIds @1 :List(UInt32);   # 0xFFFFFFFF: a block outside the pool's attention window
  }
}

struct WorkerStats {
  pools @0 :List(PoolStats);
  struct PoolStats {
    poolId @0 :UInt32;
    totalBlocks @1 :UInt32;
    usedBlocks @2 :UInt32;
    cachedBlocks @3 :UInt32;     # free for reuse but still holding cached KV
    layout @4 :Common.KvLayout;  # what a client needs to attach it and size its prompts
  }
  reuseHits @1 :UInt64;
  evictions @2 :UInt64;
  offloadedBlocks @3 :UInt64;
  onboardedBlocks @4 :UInt64;
  clusterCounts @5 :Bool;
  # True for a node session: the counts of use cover every tenant. A tenant session sees
  # the pools' sizes and layouts only (how full they are depends on other tenants): false.
}

interface Worker {
  attachPool @0 (poolId :UInt32, layout :Common.KvLayout) -> (attachment :PoolAttachment);
  # Maps the pool into the caller. FAILED_PRECONDITION when `layout` differs from the
  # pool's (the message names the field); NOT_FOUND for an unknown pool.

  allocate @1 (sequenceId :UInt64, poolId :UInt32, keys :List(Common.BlockKey),
               numTokens :UInt32, partialTokens :List(UInt32), tokens :List(UInt32),
               formatTag :UInt64, reserveTokens :UInt32, poolIds :List(UInt32))
      -> (allocation :Allocation);
  # Builds the block table for a new sequence of `numTokens` tokens, reusing the cached
  # prefix named by `keys` (one per full block, under the session's salt) and, with
  # `tokens` (the whole prompt; numTokens entries), the leading tokens of one more cached
  # block of the same `formatTag` (what else changes KV values: LoRA, model). Without
  # `tokens` there is no partial reuse. `partialTokens` is unused (superseded by
  # `tokens`). RESOURCE_EXHAUSTED when eviction cannot free enough blocks.
  # `reserveTokens` above 0 makes a static sequence: its table holds the blocks of that
  # many tokens (at least numTokens) from now on and never changes; extend past it is
  # OUT_OF_RANGE. 0: a dynamic sequence, grown by extend.
  # `poolIds` (distinct, of one block size) make the sequence span those pools, poolId
  # aside: a table in each, and extend, commit, onboard and free cover them all. The
  # prefix reused is the longest every one of them serves (a windowed pool by its sinks
  # and its last window), and so is the partial reuse after it.

  extend @2 (sequenceId :UInt64, numTokens :UInt32) -> (allocation :Allocation);
  # Grows the sequence to `numTokens` tokens (decode). NOT_FOUND: unknown sequence;
  # OUT_OF_RANGE: past a static sequence's reserve.

  free @3 (sequenceId :UInt64) -> ();
  # Drops the sequence's references; committed blocks stay cached until evicted. Also done
  # for every sequence of a connection that drops.

  commit @4 (sequenceId :UInt64, keys :List(Common.BlockKey), retention :Common.RetentionConfig,
             tokens :List(UInt32)) -> (committed :UInt32);
  # Publishes the sequence's full blocks under `keys` (in order from its first block) with
  # the request's retention; they become reusable and are announced to the coordinator.
  # `tokens` (the committed blocks' tokens) make them candidates for partial reuse.
  # Returns how many blocks this call cached (already cached ones are not counted).

  lookupLocal @5 (poolId :UInt32, keys :List(Common.BlockKey), poolIds :List(UInt32))
      -> (matchedBlocks :UInt32);
  # Longest prefix of `keys` cached in this worker's pool, or that every pool of `poolIds`
  # (when given) serves.

  onboard @6 (sequenceId :UInt64, keys :List(Common.BlockKey), sources :List(Common.Location),
              retention :Common.RetentionConfig)
      -> (onboardedBlocks :UInt32, cachedBlocks :UInt32, fromHostBlocks :UInt32, fromDiskBlocks :UInt32,
          fromRemoteBlocks :UInt32);
  # Fills the sequence's blocks after its reused prefix from this node's host and disk
  # tiers, in order, up to the first block they lack; then, where `sources` names other
  # nodes (the locations a coordinator lookup gave, nodeId read, in preference order),
  # fetches the blocks still missing from them over the network (the worker resolves the
  # ids at its coordinator and reads with its node credential). Commits what it filled
  # under `keys` (the sequence's full blocks from its first) with `retention`.
  # `cachedBlocks`: leading full blocks that now hold KV; `fromHostBlocks` +
  # `fromDiskBlocks` + `fromRemoteBlocks` = `onboardedBlocks`, by where they came from. A
  # node that cannot be reached is skipped: fewer blocks, never an error.

  stats @7 () -> (stats :WorkerStats);
}
