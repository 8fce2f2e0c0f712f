#include "services/coordinator/rpc/lookup_answer.h"

#include "services/rpc/schema_convert.h"

namespace kvtier::coordinator {
namespace {

namespace schema = rpc::schema;

// A Text takes its bytes and a NUL, padded to whole words.
uint64_t TextWords(size_t length) { return (length + 1 + 7) / 8; }

// A list of structs: a tag word, then the elements.
template <typename T>
uint64_t StructListWords(size_t count) {
  return 1 + count * capnp::sizeInWords<T>();
}

capnp::Text::Reader AsText(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }

schema::Tier ToSchemaTier(Tier tier) { return static_cast<schema::Tier>(tier); }

}  // namespace

void LookupAnswerWriter::Write(
    const LookupResult& result, std::span<const BlockKey> keys, LookupAnswerForm form,
    kj::FunctionParam<schema::LookupResult::Builder(capnp::MessageSize)> init) {
  if (form == LookupAnswerForm::kCompact) ListNodes(result);
  schema::LookupResult::Builder out = init(capnp::MessageSize{SizeInWords(result, form), 0});
  out.setMatchedBlocks(result.matched_blocks);
  if (form == LookupAnswerForm::kCompact) {
    WriteCompact(result, out);
  } else {
    WriteFull(result, keys, out);
  }
  if (result.partial.tokens > 0) {
    out.setPartialMatchTokens(result.partial.tokens);
    out.setPartialBlockTokens(result.partial.block_tokens);
    WriteBlock(result.partial.key, result.partial.locations, out.initPartialBlock());
  }
  auto scores = out.initScores(static_cast<unsigned>(result.scores.size()));
  for (unsigned i = 0; i < result.scores.size(); ++i) {
    const NodeScore& score = result.scores[i];
    scores[i].setNodeId(AsText(coordinator_.NodeName(score.node)));
    scores[i].setPrefixBlocks(score.prefix_blocks);
    scores[i].setScore(score.score);
    scores[i].setPartialTokens(score.partial_tokens);
  }
}

void LookupAnswerWriter::ListNodes(const LookupResult& result) {
  for (const NodeId node : nodes_) slot_of_[node] = kNotListed;
  nodes_.clear();
  const uint32_t end = result.location_begin[result.matched_blocks];
  for (uint32_t i = result.location_begin[0]; i < end; ++i) {
    const NodeId node = result.locations[i].node;
    if (node >= slot_of_.size()) slot_of_.resize(size_t{node} + 1, kNotListed);
    if (slot_of_[node] != kNotListed) continue;
    slot_of_[node] = static_cast<uint32_t>(nodes_.size());
    nodes_.push_back(node);
  }
}

uint64_t LookupAnswerWriter::SizeInWords(const LookupResult& result, LookupAnswerForm form) const {
  auto located_words = [&](std::span<const Location> locations) {
    uint64_t words = StructListWords<schema::Location>(locations.size());
    for (const Location& l : locations) words += TextWords(coordinator_.NodeName(l.node).size());
    return words;
  };
  uint64_t words = capnp::sizeInWords<schema::Coordinator::LookupResults>() +
                   capnp::sizeInWords<schema::LookupResult>();
  if (form == LookupAnswerForm::kCompact) {
    words += nodes_.size();  // the list of Text pointers
    for (const NodeId node : nodes_) words += TextWords(coordinator_.NodeName(node).size());
    words += StructListWords<schema::CompactLocation>(result.location_begin[result.matched_blocks] -
                                                      result.location_begin[0]);
    words += (uint64_t{result.matched_blocks} * sizeof(uint32_t) + 7) / 8;
  } else {
    words += StructListWords<schema::MatchedBlock>(result.matched_blocks);
    for (uint32_t i = 0; i < result.matched_blocks; ++i) {
      words += capnp::sizeInWords<schema::BlockKey>() + located_words(result.LocationsOf(i));
    }
  }
  if (result.partial.tokens > 0) {
    words += capnp::sizeInWords<schema::MatchedBlock>() + capnp::sizeInWords<schema::BlockKey>() +
             located_words(result.partial.locations);
  }
  words += StructListWords<schema::NodeScore>(result.scores.size());
  for (const NodeScore& score : result.scores)
    words += TextWords(coordinator_.NodeName(score.node).size());
  return words;
}

void LookupAnswerWriter::WriteCompact(const LookupResult& result,
                                      schema::LookupResult::Builder out) const {
  auto nodes = out.initNodes(static_cast<unsigned>(nodes_.size()));
  for (unsigned i = 0; i < nodes_.size(); ++i)
    nodes.set(i, AsText(coordinator_.NodeName(nodes_[i])));
  const uint32_t first = result.location_begin[0];
  auto locations = out.initLocations(result.location_begin[result.matched_blocks] - first);
  for (unsigned i = 0; i < locations.size(); ++i) {
    const Location& location = result.locations[first + i];
    // ListNodes gave every node a slot under 65,536 (NodeIds are 16 bits).
    locations[i].setNode(static_cast<uint16_t>(slot_of_[location.node]));
    locations[i].setTier(ToSchemaTier(location.tier));
    locations[i].setPoolId(location.pool);
  }
  auto ends = out.initLocationEnds(result.matched_blocks);
  for (uint32_t i = 0; i < result.matched_blocks; ++i)
    ends.set(i, result.location_begin[i + 1] - first);
}

void LookupAnswerWriter::WriteFull(const LookupResult& result, std::span<const BlockKey> keys,
                                   schema::LookupResult::Builder out) const {
  auto blocks = out.initBlocks(result.matched_blocks);
  for (uint32_t i = 0; i < result.matched_blocks; ++i)
    WriteBlock(keys[i], result.LocationsOf(i), blocks[i]);
}

void LookupAnswerWriter::WriteBlock(const BlockKey& key, std::span<const Location> locations,
                                    schema::MatchedBlock::Builder out) const {
  rpc::FromKey(key, out.initKey());
  auto list = out.initLocations(static_cast<unsigned>(locations.size()));
  for (unsigned j = 0; j < locations.size(); ++j) {
    list[j].setNodeId(AsText(coordinator_.NodeName(locations[j].node)));
    list[j].setTier(ToSchemaTier(locations[j].tier));
    list[j].setPoolId(locations[j].pool);
  }
}

}  // namespace kvtier::coordinator
