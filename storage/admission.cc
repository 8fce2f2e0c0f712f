#include "storage/admission.h"

#include <algorithm>
#include <bit>

namespace kvtier::storage {
namespace {
// A losing candidate seen this often still enters one time in kChanceDraws.
constexpr uint8_t kChanceMinEstimate = 6;
constexpr uint64_t kChanceDraws = 128;
constexpr uint64_t kSketchMinWidth = 1 << 10;
constexpr uint64_t kSketchMaxWidth = 1 << 24;
// Requests between two agings, per counter. TinyLFU's paper ages after ten per cached
// entry, but here every lookup counts each block of its prompt: one per counter follows
// the workload closely enough (ten cost hit rate on every replay: docs/benchmarks.md#disk-admission).
constexpr uint64_t kSamplesPerCounter = 1;
}  // namespace

Result<AdmissionPolicy> ParseAdmissionPolicy(std::string_view name) {
  if (name == "all") return AdmissionPolicy::kAll;
  if (name == "min-count") return AdmissionPolicy::kMinCount;
  if (name == "tinylfu") return AdmissionPolicy::kTinyLfu;
  return InvalidArgumentError("admission policy \"" + std::string(name) +
                              "\" is not one of: all, min-count, tinylfu");
}

std::string_view AdmissionPolicyName(AdmissionPolicy policy) {
  switch (policy) {
    case AdmissionPolicy::kAll: return "all";
    case AdmissionPolicy::kMinCount: return "min-count";
    case AdmissionPolicy::kTinyLfu: return "tinylfu";
  }
  return "?";
}

Result<std::unique_ptr<DiskAdmission>> DiskAdmission::Create(const DiskAdmissionOptions& options) {
  if (options.min_count < 1 || options.min_count > 16) {
    return InvalidArgumentError("admission min_count " + std::to_string(options.min_count) +
                                " is out of range [1, 16]");
  }
  const uint64_t blocks = options.expected_blocks == 0 ? 1 << 16 : options.expected_blocks;
  const uint64_t width = std::clamp(std::bit_ceil(blocks), kSketchMinWidth, kSketchMaxWidth);
  KVTIER_ASSIGN_OR_RETURN(
      FrequencySketch sketch,
      FrequencySketch::Create({.width = static_cast<uint32_t>(width),
                               .sample_size = static_cast<uint32_t>(width * kSamplesPerCounter)}));
  return std::unique_ptr<DiskAdmission>(new DiskAdmission(options, std::move(sketch)));
}

DiskAdmission::DiskAdmission(const DiskAdmissionOptions& options, FrequencySketch sketch)
    : options_(options),
      sketch_(std::move(sketch)),
      random_(options.seed != 0
                  ? options.seed
                  : (uint64_t{std::random_device{}()} << 32) | std::random_device{}()) {}

void DiskAdmission::Record(std::span<const BlockKey> keys) {
  if (options_.policy == AdmissionPolicy::kAll) return;
  MutexLock lock(mu_);
  for (const BlockKey& key : keys) sketch_.Record(key);
}

bool DiskAdmission::Admit(const BlockKey& candidate, uint8_t priority,
                          std::span<const DisplacedBlock> displaced) {
  if (displaced.empty()) return true;
  MutexLock lock(mu_);
  bool admitted = true;
  switch (options_.policy) {
    case AdmissionPolicy::kAll: break;
    case AdmissionPolicy::kMinCount:
      admitted = sketch_.Estimate(candidate) >= options_.min_count;
      break;
    case AdmissionPolicy::kTinyLfu: admitted = TinyLfuAdmits(candidate, priority, displaced); break;
  }
  ++(admitted ? stats_.admitted : stats_.rejected);
  return admitted;
}

bool DiskAdmission::TinyLfuAdmits(const BlockKey& candidate, uint8_t priority,
                                  std::span<const DisplacedBlock> displaced) {
  const uint8_t frequency = sketch_.Estimate(candidate);
  bool wins = true;
  for (const DisplacedBlock& victim : displaced) {
    if (priority != victim.priority) {
      if (priority < victim.priority) return false;  // priorities are never overridden
      continue;
    }
    if (frequency < sketch_.Estimate(victim.key)) wins = false;
  }
  if (wins) return true;
  if (frequency >= kChanceMinEstimate && random_() % kChanceDraws == 0) {
    ++stats_.admitted_by_chance;
    return true;
  }
  return false;
}

DiskAdmissionStats DiskAdmission::Stats() const {
  MutexLock lock(mu_);
  DiskAdmissionStats stats = stats_;
  stats.agings = sketch_.agings();
  return stats;
}

}  // namespace kvtier::storage
