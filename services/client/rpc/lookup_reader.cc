#include "services/client/rpc/lookup_reader.h"

#include <string>

#include "services/rpc/schema_convert.h"

namespace kvtier::client {
namespace {

namespace schema = rpc::schema;

Status Malformed(const std::string& what) {
  return InternalError("the coordinator's lookup answer " + what);
}

// Schema rule 4: an enumerant this reader does not know is an error, never a guess.
Result<Tier> ReadTier(schema::Tier tier) {
  switch (tier) {
    case schema::Tier::GPU: return Tier::kGpu;
    case schema::Tier::HOST: return Tier::kHost;
    case schema::Tier::DISK: return Tier::kDisk;
  }
  return Malformed("has unknown tier " + std::to_string(static_cast<uint16_t>(tier)));
}

Result<std::vector<Location>> ReadNamed(capnp::List<schema::Location>::Reader list) {
  std::vector<Location> out;
  out.reserve(list.size());
  for (const auto l : list) {
    KVTIER_ASSIGN_OR_RETURN(const Tier tier, ReadTier(l.getTier()));
    out.push_back({l.getNodeId().cStr(), tier, l.getPoolId()});
  }
  return out;
}

Status ReadFull(schema::LookupResult::Reader r, LookupResult& out) {
  for (const auto block : r.getBlocks()) {
    KVTIER_ASSIGN_OR_RETURN(std::vector<Location> locations, ReadNamed(block.getLocations()));
    out.locations.push_back(std::move(locations));
  }
  return Status::Ok();
}

Status ReadCompact(schema::LookupResult::Reader r, LookupResult& out) {
  const auto nodes = r.getNodes();
  const auto locations = r.getLocations();
  uint32_t begin = 0;
  for (const uint32_t end : r.getLocationEnds()) {
    if (end < begin || end > locations.size()) {
      return Malformed("ends block " + std::to_string(out.locations.size()) + "'s locations at " +
                       std::to_string(end) + ", outside [" + std::to_string(begin) + ", " +
                       std::to_string(locations.size()) + "]");
    }
    std::vector<Location>& block = out.locations.emplace_back();
    block.reserve(end - begin);
    for (uint32_t i = begin; i < end; ++i) {
      const auto l = locations[i];
      if (l.getNode() >= nodes.size()) {
        return Malformed("names node " + std::to_string(l.getNode()) + " of a table of " +
                         std::to_string(nodes.size()));
      }
      KVTIER_ASSIGN_OR_RETURN(const Tier tier, ReadTier(l.getTier()));
      block.push_back({nodes[l.getNode()].cStr(), tier, l.getPoolId()});
    }
    begin = end;
  }
  return Status::Ok();
}

}  // namespace

Result<LookupResult> ReadLookupAnswer(schema::LookupResult::Reader r) {
  LookupResult out;
  out.matched_blocks = r.getMatchedBlocks();
  const bool full = r.hasBlocks();
  const uint32_t listed = full ? r.getBlocks().size() : r.getLocationEnds().size();
  if (listed != out.matched_blocks) {
    return Malformed("lists " + std::to_string(listed) + " blocks' locations for " +
                     std::to_string(out.matched_blocks) + " matched blocks");
  }
  out.locations.reserve(out.matched_blocks);
  KVTIER_RETURN_IF_ERROR(full ? ReadFull(r, out) : ReadCompact(r, out));
  out.partial_match_tokens = r.getPartialMatchTokens();
  if (out.partial_match_tokens > 0 && r.hasPartialBlock()) {
    out.partial_block_tokens = r.getPartialBlockTokens();
    out.partial_block_key = rpc::ToKey(r.getPartialBlock().getKey());
    KVTIER_ASSIGN_OR_RETURN(out.partial_block_locations,
                            ReadNamed(r.getPartialBlock().getLocations()));
  }
  for (const auto s : r.getScores()) {
    out.scores.push_back(
        {s.getNodeId().cStr(), s.getPrefixBlocks(), s.getScore(), s.getPartialTokens()});
  }
  return out;
}

}  // namespace kvtier::client
