#include "services/coordinator/rpc/coordinator_metrics.h"

namespace kvtier::coordinator {

Result<std::unique_ptr<CoordinatorMetrics>> CoordinatorMetrics::Create(MetricsRegistry& r) {
  std::unique_ptr<CoordinatorMetrics> m(new CoordinatorMetrics());
  KVTIER_RETURN_IF_ERROR(m->AddLookups(r));
  KVTIER_RETURN_IF_ERROR(m->AddIndex(r));
  KVTIER_RETURN_IF_ERROR(m->AddEvents(r));
  return m;
}

Status CoordinatorMetrics::AddLookups(MetricsRegistry& r) {
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * lookups,
                          r.AddCounter("kvtier_coordinator_lookups_total", "Prefix lookups."));
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * asked,
                          r.AddCounter("kvtier_coordinator_lookup_blocks_total",
                                       "Full blocks of the prompts looked up."));
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * hits,
                          r.AddCounter("kvtier_coordinator_lookup_hit_blocks_total",
                                       "Matched blocks by the best tier holding them.", {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * tail,
                          r.AddCounter("kvtier_coordinator_lookup_tail_tokens_total",
                                       "Tokens after the full blocks, sent for partial matching."));
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * partial,
                          r.AddCounter("kvtier_coordinator_lookup_partial_matches_total",
                                       "Lookups whose tail tokens matched a cached block."));
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * partial_tokens,
                          r.AddCounter("kvtier_coordinator_lookup_partial_tokens_total",
                                       "Tail tokens that matched a cached block (partial reuse)."));
  KVTIER_ASSIGN_OR_RETURN(
      HistogramFamily * matched,
      r.AddHistogram("kvtier_coordinator_matched_blocks", "Blocks matched per lookup.",
                     {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}));
  KVTIER_ASSIGN_OR_RETURN(
      HistogramFamily * latency,
      r.AddHistogram("kvtier_coordinator_lookup_duration_seconds", "Index time of one lookup.",
                     ExponentialBuckets(1e-7, 2, 20)));
  lookups_ = &lookups->WithLabels({});
  lookup_blocks_ = &asked->WithLabels({});
  hit_blocks_ = {&hits->WithLabels({std::string(TierName(Tier::kGpu))}),
                 &hits->WithLabels({std::string(TierName(Tier::kHost))}),
                 &hits->WithLabels({std::string(TierName(Tier::kDisk))})};
  tail_tokens_ = &tail->WithLabels({});
  partial_matches_ = &partial->WithLabels({});
  partial_tokens_ = &partial_tokens->WithLabels({});
  matched_blocks_ = &matched->WithLabels({});
  lookup_seconds_ = &latency->WithLabels({});
  return Status::Ok();
}

Status CoordinatorMetrics::AddIndex(MetricsRegistry& r) {
  KVTIER_ASSIGN_OR_RETURN(GaugeFamily * blocks,
                          r.AddGauge("kvtier_coordinator_index_blocks", "Blocks in the index."));
  KVTIER_ASSIGN_OR_RETURN(GaugeFamily * bytes,
                          r.AddGauge("kvtier_coordinator_index_bytes", "Memory of the index."));
  KVTIER_ASSIGN_OR_RETURN(GaugeFamily * nodes,
                          r.AddGauge("kvtier_coordinator_nodes", "Nodes with a live lease."));
  KVTIER_ASSIGN_OR_RETURN(
      GaugeFamily * capacity_blocks,
      r.AddGauge("kvtier_coordinator_capacity_blocks",
                 "Blocks the live nodes' pools hold at most, as registered, by tier.", {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(
      GaugeFamily * capacity_bytes,
      r.AddGauge("kvtier_coordinator_capacity_bytes",
                 "Bytes of the live nodes' pools and tiers, as registered, by tier.", {"tier"}));
  KVTIER_ASSIGN_OR_RETURN(
      GaugeFamily * held,
      r.AddGauge("kvtier_coordinator_held_blocks",
                 "Blocks the index has the live nodes hold, by tier.", {"tier"}));
  index_blocks_ = &blocks->WithLabels({});
  index_bytes_ = &bytes->WithLabels({});
  nodes_ = &nodes->WithLabels({});
  for (int t = 0; t < kTierCount; ++t) {
    const std::string tier(TierName(static_cast<Tier>(t)));
    capacity_blocks_[t] = &capacity_blocks->WithLabels({tier});
    capacity_bytes_[t] = &capacity_bytes->WithLabels({tier});
    held_blocks_[t] = &held->WithLabels({tier});
  }
  return Status::Ok();
}

Status CoordinatorMetrics::AddEvents(MetricsRegistry& r) {
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * events,
      r.AddCounter("kvtier_coordinator_events_total",
                   "KV events applied, by kind (an event names a run of blocks: a chain stored, or "
                   "blocks removed or moved together).",
                   {"kind"}));
  KVTIER_ASSIGN_OR_RETURN(
      evictions_,
      r.AddCounter("kvtier_coordinator_evictions_total",
                   "Blocks evicted from a node's tier, by their priority.", {"priority"}));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * gaps,
      r.AddCounter("kvtier_coordinator_sequence_gaps_total", "Event streams found with a gap."));
  KVTIER_ASSIGN_OR_RETURN(CounterFamily * resyncs, r.AddCounter("kvtier_coordinator_resyncs_total",
                                                                "Snapshots asked of nodes."));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * expiries,
      r.AddCounter("kvtier_coordinator_lease_expiries_total", "Node leases that ran out."));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * conflicts,
      r.AddCounter("kvtier_coordinator_name_conflicts_total",
                   "Registrations refused: another live, connected node holds the name."));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * refused_full,
      r.AddCounter("kvtier_coordinator_index_full_refusals_total",
                   "Stored events left out of the index: it held coordinator.max_index_blocks, "
                   "or the event's parent had been left out."));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * orphaned,
      r.AddCounter("kvtier_coordinator_orphaned_blocks_total",
                   "Stored blocks left out of the index because no node held their parent, nor "
                   "brought it while they waited: no lookup could reach them (not those their "
                   "node removed meanwhile)."));
  KVTIER_ASSIGN_OR_RETURN(
      CounterFamily * adopted,
      r.AddCounter("kvtier_coordinator_adopted_blocks_total",
                   "Stored blocks that waited for another event to bring their parent, and were "
                   "indexed when it came."));
  KVTIER_ASSIGN_OR_RETURN(GaugeFamily * waiting,
                          r.AddGauge("kvtier_coordinator_waiting_blocks",
                                     "Stored blocks waiting for an event to bring their parent."));
  events_ = {&events->WithLabels({"stored"}), &events->WithLabels({"removed"}),
             &events->WithLabels({"tier_changed"}), &events->WithLabels({"cleared"})};
  sequence_gaps_ = &gaps->WithLabels({});
  resyncs_ = &resyncs->WithLabels({});
  lease_expiries_ = &expiries->WithLabels({});
  name_conflicts_ = &conflicts->WithLabels({});
  index_full_refusals_ = &refused_full->WithLabels({});
  orphaned_blocks_ = &orphaned->WithLabels({});
  adopted_blocks_ = &adopted->WithLabels({});
  waiting_blocks_ = &waiting->WithLabels({});
  return Status::Ok();
}

void CoordinatorMetrics::RecordLookup(const LookupResult& result, Asked asked, double seconds) {
  lookups_->Inc();
  lookup_blocks_->Inc(static_cast<double>(asked.blocks));
  if (asked.tail_tokens > 0) tail_tokens_->Inc(static_cast<double>(asked.tail_tokens));
  if (result.partial.tokens > 0) {
    partial_matches_->Inc();
    partial_tokens_->Inc(result.partial.tokens);
  }
  matched_blocks_->Observe(result.matched_blocks);
  lookup_seconds_->Observe(seconds);
  for (uint32_t b = 0; b < result.matched_blocks; ++b) {
    if (result.LocationsOf(b).empty())
      continue;  // between a windowed pool's sinks and window: not needed
    int best = kTierCount - 1;
    for (const Location& l : result.LocationsOf(b)) best = std::min(best, static_cast<int>(l.tier));
    hit_blocks_[best]->Inc();
  }
}

void CoordinatorMetrics::Update(const CoordinatorStats& stats) {
  index_blocks_->Set(static_cast<double>(stats.index.blocks));
  index_bytes_->Set(static_cast<double>(stats.index.memory_bytes));
  nodes_->Set(static_cast<double>(stats.membership.live_nodes));
  for (int t = 0; t < kTierCount; ++t) {
    capacity_blocks_[t]->Set(static_cast<double>(stats.capacity_blocks[t]));
    capacity_bytes_[t]->Set(static_cast<double>(stats.capacity_bytes[t]));
    held_blocks_[t]->Set(static_cast<double>(stats.held_blocks[t]));
  }
  sequence_gaps_->Inc(static_cast<double>(stats.membership.sequence_gaps - last_.sequence_gaps));
  resyncs_->Inc(static_cast<double>(stats.membership.resyncs - last_.resyncs));
  lease_expiries_->Inc(static_cast<double>(stats.membership.lease_expiries - last_.lease_expiries));
  name_conflicts_->Inc(static_cast<double>(stats.membership.name_conflicts - last_.name_conflicts));
  const uint64_t refused_full = stats.index.refused_full + stats.refused_children;
  index_full_refusals_->Inc(static_cast<double>(refused_full - last_refused_full_));
  last_refused_full_ = refused_full;
  orphaned_blocks_->Inc(static_cast<double>(stats.orphaned_blocks - last_orphaned_));
  last_orphaned_ = stats.orphaned_blocks;
  adopted_blocks_->Inc(static_cast<double>(stats.adopted_blocks - last_adopted_));
  last_adopted_ = stats.adopted_blocks;
  waiting_blocks_->Set(static_cast<double>(stats.waiting_blocks));
  last_ = stats.membership;
  for (int p = 0; p <= kMaxPriority; ++p) {
    const uint64_t delta = stats.index.evictions_by_priority[p] - last_evictions_[p];
    if (delta > 0) evictions_->WithLabels({std::to_string(p)}).Inc(static_cast<double>(delta));
  }
  last_evictions_ = stats.index.evictions_by_priority;
}

}  // namespace kvtier::coordinator
