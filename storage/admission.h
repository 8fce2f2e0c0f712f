// DiskAdmission: which blocks a full disk tier takes, weighed against the blocks they would
// push out of it.
//
// A node's two tiers are W-TinyLFU's two regions (Einziger, Eytan, Friedman and Manes,
// arXiv:1512.00727): the host tier is the window, which every block the pool evicts enters
// (recency decides there), and the disk tier is the main region. A block the host tier
// evicts goes down while the disk has room; once the disk is full the block is a candidate
// against the blocks that would make room for it (the disk's next victims, `displaced`),
// and the policy decides before anything is written:
//   kAll       every candidate enters; the disk's prioritized LRU decides who leaves.
//   kMinCount  a candidate enters once it was requested `min_count` times (a threshold).
//   kTinyLfu   the higher effective priority wins; at equal priority the candidate must
//              have been requested at least as often as every block it displaces
//              (FrequencySketch estimates; ties go to the newer block, which measured
//              better than keeping the victim): a block requested once does not push out
//              blocks requested twice, and a losing candidate costs no disk write. A
//              candidate requested at least 6 times that loses still enters one time in
//              128, so that inflated counts of victims (a hash collision, or a tenant
//              requesting its own blocks over and over) cannot keep a hot block out for good.
// Requests are what the node counts with Record: in `kvtier up` the coordinator's lookups,
// in `kvtier store` its own puts, gets and contains.
//
// Thread safety: safe from any thread; its mutex is a leaf (Admit runs under the tiers'
// locks).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>

#include "common/block_key.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "storage/frequency_sketch.h"
#include "storage/tier.h"

namespace kvtier::storage {

enum class AdmissionPolicy : uint8_t { kAll, kMinCount, kTinyLfu };

// "all", "min-count", "tinylfu"; kInvalidArgument naming the choices.
[[nodiscard]] Result<AdmissionPolicy> ParseAdmissionPolicy(std::string_view name);
[[nodiscard]] std::string_view AdmissionPolicyName(AdmissionPolicy policy);

struct DiskAdmissionOptions {
  AdmissionPolicy policy = AdmissionPolicy::kTinyLfu;
  uint32_t min_count = 2;        // kMinCount: requests needed, in [1, 16]
  uint64_t expected_blocks = 0;  // blocks the tiers hold together: sizes the sketch (0: 64 Ki)
  uint64_t seed = 0;             // the 1-in-128 draws; 0: from std::random_device
};

struct DiskAdmissionStats {
  uint64_t admitted = 0;            // candidates that displaced blocks
  uint64_t rejected = 0;            // candidates dropped
  uint64_t admitted_by_chance = 0;  // of `admitted`, losers let in by the 1-in-128 draw
  uint64_t agings = 0;
};

class DiskAdmission {
 public:
  // kInvalidArgument: a min_count out of range.
  [[nodiscard]] static Result<std::unique_ptr<DiskAdmission>> Create(
      const DiskAdmissionOptions& options);

  // Counts requests of these blocks (kAll counts nothing).
  void Record(std::span<const BlockKey> keys);
  // Whether `candidate` (its effective priority given) enters the disk at the cost of
  // `displaced` (in eviction order). Nothing displaced: always.
  [[nodiscard]] bool Admit(const BlockKey& candidate, uint8_t priority,
                           std::span<const DisplacedBlock> displaced);
  DiskAdmissionStats Stats() const;

 private:
  explicit DiskAdmission(const DiskAdmissionOptions& options, FrequencySketch sketch);
  bool TinyLfuAdmits(const BlockKey& candidate, uint8_t priority,
                     std::span<const DisplacedBlock> displaced) KVTIER_REQUIRES(mu_);

  const DiskAdmissionOptions options_;
  mutable Mutex mu_;
  FrequencySketch sketch_ KVTIER_GUARDED_BY(mu_);
  std::mt19937_64 random_ KVTIER_GUARDED_BY(mu_);
  DiskAdmissionStats stats_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::storage
