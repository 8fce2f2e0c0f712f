// The schema's entries for a node's tiers (store.*) and a worker's hand-off to them and
// serving of them (worker.* beyond its pool).
#include <string>

#include "common/config_field_kinds.h"
#include "common/config_fields.h"

namespace kvtier::config_internal {

// The node's host and disk tiers, and `kvtier store`'s serving of them.
void AddStoreFields(std::vector<Field>& fields) {
  fields.push_back(UintField(
      "store.host_cache_bytes", "Host tier capacity (0: no host tier).", 0, 1ull << 44,
      [](auto& c) -> auto& { return c.store.host_cache_bytes; }));
  fields.push_back(UintField(
      "store.data_port",
      "`kvtier store`: TCP port of its data stream, on the listen host (0 picks one; "
      "tickets carry the address).",
      0, 65535, [](auto& c) -> auto& { return c.store.data_port; }));
  fields.push_back(UintField(
      "store.data_stream_threads",
      "`kvtier store`: event loops (threads) serving its data stream's connections; 0: "
      "half the hardware threads, 2 to 8.",
      0, 64, [](auto& c) -> auto& { return c.store.data_stream_threads; }));
  fields.push_back(UintField(
      "store.data_stream_tier_threads",
      "`kvtier store`: threads that run its data stream's disk work (gets of blocks on "
      "disk, puts that write or demote to disk), so that no event loop waits for the "
      "disk; with a disk tier only. 0: as many as the event loops.",
      0, 64, [](auto& c) -> auto& { return c.store.data_stream_tier_threads; }));
  fields.push_back(BoolField(
      "store.data_stream_lend_pages",
      "`kvtier store`: send the host tier's pages zero copy (spliced) to data stream "
      "gets of node sessions, pinned until the reader acks them; false copies them into "
      "the socket, as for tenants.",
      [](auto& c) -> auto& { return c.store.data_stream_lend_pages; }));
  fields.push_back(BoolField(
      "store.data_stream",
      "`kvtier store`: serve the data stream that openGet/openPut tickets name, beside the "
      "RPC (over TLS when tls is set); false: callers use put/get.",
      [](auto& c) -> auto& { return c.store.data_stream; }));
  fields.push_back(StringField(
      "store.disk_admission",
      "Which blocks a full disk tier takes from the host tier (storage/admission.h): all "
      "(its LRU decides who leaves), min-count (blocks requested disk_admission_min_count "
      "times) or tinylfu (a block enters only if requested more often than the disk blocks "
      "it would push out, or of higher priority). `kvtier up` counts lookups, `kvtier "
      "store` its own puts, gets and contains.",
      "one of: all, min-count, tinylfu", false,
      [](auto& c) -> auto& { return c.store.disk_admission; },
      [](std::string_view v) -> Status {
        if (v == "all" || v == "min-count" || v == "tinylfu") return Status::Ok();
        return InvalidArgumentError("\"" + std::string(v) +
                                    "\" is not one of all, min-count, tinylfu");
      }));
  fields.push_back(UintField(
      "store.disk_admission_min_count",
      "Requests a block needs before it may enter a full disk tier, with "
      "disk_admission: min-count.",
      1, 16, [](auto& c) -> auto& { return c.store.disk_admission_min_count; }));
  fields.push_back(UintField(
      "store.host_free_percent",
      "Share of the host tier (percent) that a thread of the node keeps free ahead of "
      "puts by moving its coldest blocks down to the disk tier, so that a put seldom "
      "waits for the disk; with a disk tier only. 0: each put moves down what it "
      "displaces itself.",
      0, 50, [](auto& c) -> auto& { return c.store.host_free_percent; }));
  fields.push_back(UintField(
      "store.disk_bytes", "Disk tier capacity in payload bytes (0: no disk tier).", 0, 1ull << 50,
      [](auto& c) -> auto& { return c.store.disk_bytes; }));
  fields.push_back(StringField(
      "store.disk_sync", "Disk tier durability: what a crash or power loss can lose.",
      "one of: none, wal, fsync", false, [](auto& c) -> auto& { return c.store.disk_sync; },
      [](std::string_view v) -> Status {
        if (v == "none" || v == "wal" || v == "fsync") return Status::Ok();
        return InvalidArgumentError("\"" + std::string(v) + "\" is not one of none, wal, fsync");
      }));
  fields.push_back(StringField(
      "store.listen", "`kvtier store`: host:port its BlockStore serves on (port 0 picks one).",
      "host:port, [ipv6]:port or unix:/path", false,
      [](auto& c) -> auto& { return c.store.listen; }, CheckListenAddress));
  fields.push_back(StringField(
      "store.advertise",
      "`kvtier store`: host:port peers reach it at (a pod's DNS name); empty: the bound "
      "listen address.",
      "host:port", true, [](auto& c) -> auto& { return c.store.advertise; }, CheckListenAddress));
}

// How a worker hands blocks to its tiers, and `kvtier worker`'s serving and write-through.
void AddWorkerNodeFields(std::vector<Field>& fields) {
  fields.push_back(UintField(
      "worker.data_port",
      "`kvtier worker`: TCP port of its BlockStore's data stream, on the listen host (0 "
      "picks one; tickets carry the address).",
      0, 65535, [](auto& c) -> auto& { return c.worker.data_port; }));
  fields.push_back(UintField(
      "worker.data_stream_threads",
      "`kvtier worker`: event loops (threads) serving its data stream's connections; 0: "
      "half the hardware threads, 2 to 8.",
      0, 64, [](auto& c) -> auto& { return c.worker.data_stream_threads; }));
  fields.push_back(UintField(
      "worker.tier_threads",
      "Helper threads that hash and copy each batch of evicted blocks into the node's "
      "tiers, and of onboarded blocks out of them, beside the worker's own thread; 0: half "
      "the hardware threads from 16 up (at most 8), a quarter below (none on up to 3).",
      0, 64, [](auto& c) -> auto& { return c.worker.tier_threads; }));
  fields.push_back(UintField(
      "worker.offload_staging_bytes",
      "Evicted blocks are copied into this much staging and stored into the node's tiers "
      "by a thread of their own, so that an allocation does not wait for the store; "
      "onboards find them there meanwhile. Blocks beyond it are stored before the "
      "allocation returns. 0: every one is; otherwise at least one block of the layout.",
      0, 1ull << 40, [](auto& c) -> auto& { return c.worker.offload_staging_bytes; }));
  fields.push_back(UintField(
      "worker.data_stream_tier_threads",
      "`kvtier worker`: threads that run its data stream's disk work (gets of blocks on "
      "disk, puts that write or demote to disk), so that no event loop waits for the "
      "disk; with a disk tier only. 0: as many as the event loops.",
      0, 64, [](auto& c) -> auto& { return c.worker.data_stream_tier_threads; }));
  fields.push_back(BoolField(
      "worker.data_stream_lend_pages",
      "`kvtier worker`: send its host tier's pages zero copy (spliced) to peers' data "
      "stream gets, pinned until the reader acks them; false copies them into the socket.",
      [](auto& c) -> auto& { return c.worker.data_stream_lend_pages; }));
  fields.push_back(BoolField(
      "worker.data_stream",
      "`kvtier worker`: serve the data stream that peers' openGet tickets name (blocks of "
      "its tiers and pool; over TLS when tls is set); false: peers fetch inline.",
      [](auto& c) -> auto& { return c.worker.data_stream; }));
  fields.push_back(UintField(
      "worker.fetch_stream_min_block_bytes",
      "`kvtier worker`: blocks at least this large are fetched from peers on their data "
      "stream, smaller ones inline in the RPC (the stream was the faster of the two from "
      "64 KiB, the smallest measured); 0: always the stream.",
      0, 1ull << 40, [](auto& c) -> auto& { return c.worker.fetch_stream_min_block_bytes; }));
  fields.push_back(StringField(
      "worker.listen",
      "`kvtier worker`: host:port its Worker and BlockStore serve on (port 0 picks one).",
      "host:port, [ipv6]:port or unix:/path", false,
      [](auto& c) -> auto& { return c.worker.listen; }, CheckListenAddress));
  fields.push_back(StringField(
      "worker.advertise",
      "`kvtier worker`: host:port peers reach it at; empty: the bound listen address.", "host:port",
      true, [](auto& c) -> auto& { return c.worker.advertise; }, CheckListenAddress));
  fields.push_back(StringListField(
      "worker.write_through_stores",
      "`kvtier worker`: node ids of storage nodes (\"<name>/store\" of a `kvtier store`) that "
      "every committed block "
      "worth offloading is also written to, so that it outlives this worker and any node can fetch "
      "it; each block "
      "goes to one of them, chosen by its key (rendezvous hashing: adding a store moves only its "
      "share); empty: none.",
      "a list of node ids", [](auto& c) -> auto& { return c.worker.write_through_stores; }));
  fields.push_back(UintField(
      "worker.write_through_queue_bytes",
      "`kvtier worker`: bytes of blocks that may wait for the write-through store; blocks "
      "beyond it are skipped (the node's own tiers still take them), never waited for. At "
      "least one block of the layout.",
      1ull << 20, 1ull << 40, [](auto& c) -> auto& { return c.worker.write_through_queue_bytes; }));
}

}  // namespace kvtier::config_internal
