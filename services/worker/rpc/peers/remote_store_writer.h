// RemoteStoreWriter: writes a worker's committed blocks through to storage nodes
// (`kvtier store`), so that a prefix computed here outlives this node (a crash, a scale
// down) and any node of the cluster can fetch it from a store. With several stores, each
// block goes to one, chosen by rendezvous hashing of its key over the store ids: every
// worker sends a block to the same store, and adding a store moves only its share.
//
// Write-through, not spill-on-eviction: a block reaches the store while the worker still
// holds it, so nothing is lost when the worker dies, and the copy goes out when its
// bytes are fresh in memory rather than when the pool is under pressure. (LMCache's
// remote backend and Mooncake's store take puts the same way.) The store indexes what
// it takes with the coordinator, where lookups find it.
//
// The worker's loop thread copies each block into its store's open batch (Write: one
// copy from pool memory into the batch, no allocation per block; batches are reused) and
// hands the batches over at the end of its tick (Submit). A thread of its own checksums
// each batch, finds its store through NodeConnections (the coordinator resolves the id)
// and puts it with the node credential, every block under its own salt scope. Bounded:
// at most `max_queued_bytes` wait; a block that does not fit is skipped and counted, so
// the loop never waits on the network. A batch the store refuses, or cannot be reached
// for after one reconnect, is dropped and counted: the worker's own tiers still hold its
// blocks, and write-through is best effort.
//
// Metrics (prefixed kvtier_worker_store_writes_): blocks_total{result=written|skipped|
// failed}, bytes_total (written), queued_bytes (gauge).
//
// Thread safety: Write and Submit from one producing thread (the worker's loop); Flush,
// Stats and the destructor from any thread. The destructor drops what is still queued
// (Flush first to wait for it).
// Ownership: borrows the NodeConnections and the registry, which outlive the writer.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"
#include "storage/block_header.h"

namespace kvtier::worker {

class NodeConnections;

struct RemoteStoreWriterOptions {
  NodeConnections* connections = nullptr;     // required
  MetricsRegistry* registry = nullptr;        // required
  std::vector<std::string> store_nodes = {};  // required: the stores' node ids ("<name>/store")
  uint64_t max_queued_bytes = 256ull << 20;
  uint64_t batch_bytes = 8ull << 20;  // blocks per put call: about this many bytes
};

struct RemoteStoreWriterStats {
  uint64_t written_blocks = 0;
  uint64_t written_bytes = 0;
  uint64_t streamed_blocks = 0;  // of written_blocks, those that went on the store's data stream
  uint64_t skipped_blocks = 0;   // the queue was full
  uint64_t failed_blocks = 0;    // the store refused them or could not be reached
  uint64_t queued_bytes = 0;
};

class RemoteStoreWriter {
 public:
  // kInvalidArgument: a required option missing, a store named twice, or a batch larger
  // than the queue.
  [[nodiscard]] static Result<std::unique_ptr<RemoteStoreWriter>> Create(
      RemoteStoreWriterOptions options);
  ~RemoteStoreWriter();
  RemoteStoreWriter(const RemoteStoreWriter&) = delete;
  RemoteStoreWriter& operator=(const RemoteStoreWriter&) = delete;

  // Copies one block into its store's open batch: `fill` is given header.payload_bytes bytes to
  // write the payload into and returns a Status. The header's checksum is taken later,
  // on the writer's thread. False when the block was not taken: the queue is full
  // (counted as skipped) or `fill` failed.
  // REQUIRES: header.payload_bytes > 0.
  template <typename Fill>
  bool Write(const storage::BlockHeader& header, Fill&& fill) {
    const std::span<uint8_t> out = Reserve(header);
    if (out.empty()) return false;
    if (Status filled = std::forward<Fill>(fill)(out); !filled.ok()) {
      Unreserve();
      return false;
    }
    return true;
  }
  // A block the caller could not give Write (its format tag past the process's bound,
  // storage/format_tag.h): counted as failed.
  void CountRefused();
  // Hands the open batches that hold a block to the writer's thread.
  void Submit();
  // Waits until every submitted batch is written or dropped; kDeadlineExceeded when that
  // took longer than `timeout`.
  [[nodiscard]] Status Flush(std::chrono::milliseconds timeout);
  RemoteStoreWriterStats Stats() const;

  class Impl;

 private:
  explicit RemoteStoreWriter(std::unique_ptr<Impl> impl);
  std::span<uint8_t> Reserve(const storage::BlockHeader& header);
  void Unreserve();
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::worker
