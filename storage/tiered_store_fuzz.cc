// Fuzz target: a node's TieredStore (a host tier of four 4 KiB pages over a disk tier)
// driven by a script of calls, one choice per byte: puts and batched puts, gets and
// batched gets (promoting disk hits or not), pins in the host tier, moves out of it,
// removals. Blocks come from four keys, two formats and two salt scopes, each with two
// possible payloads of one to three pages, so that keys meet under other scopes and
// other bytes, and the host tier's evictions push blocks down to disk (or drop them
// below the demotion priority). Now and then a header lies (its checksum, its size, a
// priority above 100).
//
// The store is made once per process and emptied between inputs through its own API.
// Beyond no crash and no sanitizer report, after every call:
// - a hit (get, batched get, pin) is a block of the key, format and scope asked for, and
//   its bytes are bytes once put under them: never another scope's or another format's;
// - a removal that succeeded leaves nothing to find;
// - what the store's events told (stores and removals per tier) is exactly what its
//   holdings list, with no block under a scope it was never put under;
// - the host tier never holds more than its capacity;
// - a refused put of one block tells no event.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <tuple>
#include <vector>

#include "common/logging.h"
#include "storage/tiered_store.h"
#include "storage/testing/blocks.h"
#include "storage/testing/tiered_stores.h"
#include "tests/testing/fuzz_check.h"
#include "tests/testing/fuzz_choices.h"
#include "tests/testing/test_util.h"

namespace kvtier::storage {
namespace {

using kvtier::testing::FuzzCheck;
using kvtier::testing::FuzzChoices;

constexpr size_t kPage = 4096;
const std::array<std::string, 2> kFormats = {"model-a|fp16", "model-b|fp8"};
constexpr std::array<uint64_t, 2> kScopes = {11, 12};

// A held copy: tier, format, key, scope.
using Copy = std::tuple<Tier, std::string, BlockKey, uint64_t>;
// What was put: format, key, scope.
using Name = std::tuple<std::string, BlockKey, uint64_t>;

// A block from (key, format, scope, version): the payload's seed is all four, so that the
// bytes of a hit name the put they came from.
testing::TestBlock MakeFuzzBlock(FuzzChoices& in) {
  const uint32_t key = in.Below(4), format = in.Below(2), scope = in.Below(2),
                 version = in.Below(2);
  const uint32_t pages = 1 + in.Below(3);
  const size_t bytes = pages * kPage - size_t{in.Below(2)} * 100;
  const auto priority =
      static_cast<uint8_t>(in.Below(4) * 25);  // 0-75: some below the demotion floor
  testing::TestBlock b =
      testing::MakeBlock(uint64_t{key} << 24 | format << 16 | scope << 8 | version, bytes, priority,
                         kScopes[scope], kFormats[format]);
  b.header.key = BlockKey{0x77, key};
  b.header.parent = BlockKey{0x77, 100};
  b.header.first_in_chain = true;
  if (in.Below(16) == 0) {  // a header that lies
    switch (in.Below(3)) {
      case 0: b.header.checksum ^= 1; break;
      case 1: b.header.payload_bytes += 1; break;
      default: b.header.priority = 101; break;
    }
  }
  return b;
}

class Harness {
 public:
  Harness() {
    // Demotions refused for another scope are logged as warnings: expected here, by the thousand.
    InitLogging(spdlog::level::err);
    TieredStoreOptions options = testing::HostOverDisk(4 * kPage, dir_.path(), 64 * kPage);
    options.host->page_bytes = kPage;
    options.host->try_huge_pages = false;
    options.disk->sync = DiskSync::kNone;  // nothing is measured here: spare the disk
    options.on_event = [this](const StoreEvent& e) { events_.push_back(e); };
    store_ = TieredStore::Create(std::move(options)).value();
  }

  // Empties the store for the next input, through its API.
  void Reset() {
    for (const auto& [tier, header] : store_->Holdings()) {
      (void)store_->Remove({header.key, header.format_tag, header.salt_scope});
    }
    FuzzCheck(store_->Holdings().empty(), "removing every holding empties the store");
    events_.clear();
    held_.clear();
    put_.clear();
  }

  void Step(FuzzChoices& in) {
    switch (in.Below(8)) {
      case 0:
      case 1: Put(in); break;
      case 2: PutBatch(in); break;
      case 3:
      case 4: Get(in); break;
      case 5: GetBatch(in); break;
      case 6: Pin(in); break;
      default: RemoveOrMove(in); break;
    }
    CheckHoldings();
  }

 private:
  void Remember(const testing::TestBlock& b) {
    put_[{std::string(b.header.format_tag), b.header.key, b.header.salt_scope}].insert(b.payload);
  }

  // A hit must be the block asked for, with bytes once put under its name.
  void CheckHit(const BlockRef& ref, const BlockHeader& header, std::span<const uint8_t> bytes) {
    FuzzCheck(header.key == ref.key && std::string_view(header.format_tag) == ref.format_tag &&
                  header.salt_scope == ref.salt_scope,
              "a hit is the key, format and scope asked for");
    FuzzCheck(bytes.size() == header.payload_bytes, "a hit's bytes are as many as its header says");
    const auto put = put_.find({std::string(ref.format_tag), ref.key, ref.salt_scope});
    FuzzCheck(
        put != put_.end() && put->second.contains(std::vector<uint8_t>(bytes.begin(), bytes.end())),
        "a hit's bytes were put under its key, format and scope");
  }

  void Put(FuzzChoices& in) {
    const testing::TestBlock b = MakeFuzzBlock(in);
    const size_t events_before = events_.size();
    const Status status = store_->Put(b.header, b.payload);
    if (status.ok()) {
      Remember(b);
    } else {
      FuzzCheck(events_.size() == events_before, "a refused put tells no event");
    }
  }

  void PutBatch(FuzzChoices& in) {
    std::vector<testing::TestBlock> blocks(1 + in.Below(3));
    for (testing::TestBlock& b : blocks) b = MakeFuzzBlock(in);
    std::vector<PutItem> items;
    items.reserve(blocks.size());
    for (const testing::TestBlock& b : blocks)
      items.push_back({b.header, b.payload, /*checksum_checked=*/false});
    const std::vector<Status> results = store_->PutBatch(items);
    FuzzCheck(results.size() == blocks.size(), "a batched put answers each block");
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (results[i].ok()) Remember(blocks[i]);
    }
  }

  void Get(FuzzChoices& in) {
    const testing::TestBlock b = MakeFuzzBlock(in);
    std::vector<uint8_t> out(3 * kPage);
    const Result<TieredHit> hit = store_->Get(b.ref(), out);
    if (hit.ok()) CheckHit(b.ref(), hit->header, std::span(out).first(hit->header.payload_bytes));
  }

  void GetBatch(FuzzChoices& in) {
    std::vector<testing::TestBlock> blocks(1 + in.Below(3));
    for (testing::TestBlock& b : blocks) b = MakeFuzzBlock(in);
    std::vector<std::vector<uint8_t>> outs(blocks.size(), std::vector<uint8_t>(3 * kPage));
    std::vector<BlockRef> refs;
    std::vector<std::span<uint8_t>> spans;
    for (size_t i = 0; i < blocks.size(); ++i) {
      refs.push_back(blocks[i].ref());
      spans.emplace_back(outs[i]);
    }
    const auto promote = in.Below(2) == 0 ? PromoteDiskHits::kYes : PromoteDiskHits::kNo;
    const std::vector<Result<TieredHit>> hits = store_->GetBatch(refs, spans, promote);
    FuzzCheck(hits.size() == refs.size(), "a batched get answers each block");
    for (size_t i = 0; i < hits.size(); ++i) {
      if (hits[i].ok())
        CheckHit(refs[i], hits[i]->header, std::span(outs[i]).first(hits[i]->header.payload_bytes));
    }
  }

  void Pin(FuzzChoices& in) {
    const testing::TestBlock b = MakeFuzzBlock(in);
    const Result<PinnedBlock> pinned = store_->host_pages().Pin(b.ref());
    if (!pinned.ok()) return;
    std::vector<uint8_t> bytes;
    pinned->ForEachPiece([&](std::span<const uint8_t> piece) {
      bytes.insert(bytes.end(), piece.begin(), piece.end());
    });
    CheckHit(b.ref(), pinned->header(), bytes);
  }

  void RemoveOrMove(FuzzChoices& in) {
    const testing::TestBlock b = MakeFuzzBlock(in);
    if (in.Below(2) == 0) {
      (void)store_->host_pages().MoveOut(b.ref());
      return;
    }
    if (!store_->Remove(b.ref()).ok()) return;
    std::vector<uint8_t> out(3 * kPage);
    FuzzCheck(store_->Get(b.ref(), out).status().code() == StatusCode::kNotFound,
              "a removed block is not found");
    FuzzCheck(!store_->Contains(b.ref()), "a removed block is not contained");
  }

  // The events told so far, applied in order, are the holdings; the host tier is within
  // its capacity.
  void CheckHoldings() {
    for (const StoreEvent& e : events_) {
      const Copy copy{e.tier, std::string(e.header.format_tag), e.header.key, e.header.salt_scope};
      if (e.kind == StoreEvent::Kind::kStored) {
        held_.insert(copy);
      } else {
        FuzzCheck(held_.erase(copy) == 1, "a removal is told of a copy that was stored");
      }
    }
    events_.clear();
    std::set<Copy> holdings;
    for (const auto& [tier, header] : store_->Holdings()) {
      FuzzCheck(put_.contains({std::string(header.format_tag), header.key, header.salt_scope}),
                "a holding was put under its scope and format");
      FuzzCheck(
          holdings.insert({tier, std::string(header.format_tag), header.key, header.salt_scope})
              .second,
          "a tier lists a block once");
    }
    FuzzCheck(holdings == held_, "the holdings are what the events told");
    const TieredStoreStats stats = store_->Stats();
    FuzzCheck(stats.host && stats.host->bytes <= 4 * kPage,
              "the host tier holds no more than its capacity");
  }

  kvtier::testing::TempDir dir_;  // the disk tier's; removed after the store closes
  std::vector<StoreEvent> events_;
  std::unique_ptr<TieredStore> store_;
  std::set<Copy> held_;                                 // from the events
  std::map<Name, std::set<std::vector<uint8_t>>> put_;  // every payload a put was answered OK for
};

}  // namespace
}  // namespace kvtier::storage

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static kvtier::storage::Harness
      harness;  // one store per process: opening RocksDB per input would be most of the run
  harness.Reset();
  kvtier::testing::FuzzChoices in(data, size);
  while (!in.done()) harness.Step(in);
  return 0;
}
