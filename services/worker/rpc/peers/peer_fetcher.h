// PeerFetcher: a worker node's reads of blocks that other nodes hold, for onboarding a
// prefix computed elsewhere (cross-node reuse).
//
// Given the ids of the nodes a lookup placed the blocks on, it finds and connects to each
// through the node's NodeConnections (the coordinator resolves ids; the node credential;
// connections kept and reused), and reads the wanted blocks through
// that node's BlockStore capability under the tenant's salt scope, node by node in the
// order given: each serves the leading run of the remaining blocks it holds. Blocks of
// at least `stream_min_block_bytes` come on the node's data stream where it runs one
// (services/store/stream), read straight into the result, or into the caller's landing
// places (PeerFetchRequest::land_in: a host pool's blocks) (connections kept per node):
// as keyed gets under a get session kept per node, scope and format (no Cap'n Proto call
// per get; a worker peer's sessions read its pool too), or openGet then the stream where
// the node answers openGetSession UNIMPLEMENTED (an earlier version). Otherwise inline
// in the get's response, copied out of it. A block is taken only when its header names
// the key, scope and format asked for and its payload has the layout's size and its
// checksum; the first that fails ends the run there.
//
// Fetches run on threads of their own (`threads`), each blocking on its RPC connections;
// Fetch returns at once with a promise for the calling thread's KJ event loop (the
// worker's), fulfilled across threads, so that loop never waits on the network. A node
// that cannot be reached or answers with an error is skipped and logged; the result is
// whatever leading run was found, possibly nothing: onboarding then falls back to
// recomputation, never to an error.
//
// Thread safety: Fetch from any thread that runs a KJ event loop. The destructor waits for
// running fetches; the promises of queued ones are broken.
// Ownership: borrows the NodeConnections, which must outlive the fetcher.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <kj/async.h>

#include "common/block_key.h"
#include "common/byte_buffer.h"
#include "common/status.h"

namespace kvtier::worker {

class NodeConnections;

struct PeerFetcherOptions {
  NodeConnections* connections = nullptr;       // required
  std::vector<std::string> self_node_ids = {};  // this node's own ids: never fetched from
  uint32_t threads = 2;                         // concurrent fetches
  uint32_t max_blocks_per_call = 1024;          // a larger request is split
  // Blocks at least this large come on a peer's data stream; smaller ones inline. With keyed gets
  // the stream beat inline from 64 KiB, the smallest block measured; inline was faster below 1 MiB
  // while each get cost an openGet:
  // docs/history/benchmarks-2026-11.md#keyed-gets-under-a-get-session-and-at-least-two-stream-loops-2026-11-24-stop-29
  uint64_t stream_min_block_bytes = 64ull << 10;
};

struct FetchedBlocks {
  std::vector<BlockKey> keys;  // the leading run of the request's keys that was found
  ByteBuffer bytes;            // their payloads, block_bytes each, in that order (none: landed)
  uint64_t block_bytes = 0;
  uint32_t rejected = 0;  // blocks refused for a header or checksum that did not match
  uint32_t streamed = 0;  // of `keys`, those that came on a node's data stream
  bool landed = false;    // the request's `land` landed `keys` (their bytes still here)
};

struct PeerFetchRequest {
  std::vector<std::string> node_ids =
      {};                           // where the lookup placed the blocks, in preference order
  std::vector<BlockKey> keys = {};  // the blocks wanted, in chain order
  std::string format_tag = {};      // storage format (services/worker/tier_link.h)
  uint64_t salt_scope = 0;
  uint64_t block_bytes = 0;
  // Optional: where each block lands (land_in[i] for keys[i], block_bytes each): memory
  // the caller keeps writable, and touches not, until the fetch's last write, which is
  // when the fetch drops `keep` (a worker's pool blocks held for it: HoldLanding). The
  // fetch writes there on its own thread; FetchedBlocks::bytes stays empty. A block after
  // the leading run taken may have been written too. Empty: into FetchedBlocks::bytes.
  std::vector<std::span<uint8_t>> land_in = {};
  // Optional: called on the fetch's thread once the leading run is in land_in or
  // FetchedBlocks::bytes, to land it where it goes (a device pool's blocks held for it:
  // one scatter from staging, or Worker::HeldBlocks::Land) before the fetch is answered;
  // then `keep` is dropped. FetchedBlocks::landed says whether it did (the bytes stay
  // where the fetch wrote them).
  std::function<Status(const FetchedBlocks&)> land = nullptr;
  std::shared_ptr<void> keep = {};
};

class PeerFetcher {
 public:
  // kInvalidArgument: no connections or no threads.
  [[nodiscard]] static Result<std::unique_ptr<PeerFetcher>> Create(PeerFetcherOptions options);
  ~PeerFetcher();
  PeerFetcher(const PeerFetcher&) = delete;
  PeerFetcher& operator=(const PeerFetcher&) = delete;

  kj::Promise<FetchedBlocks> Fetch(PeerFetchRequest request);

  class Impl;

 private:
  explicit PeerFetcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::worker
