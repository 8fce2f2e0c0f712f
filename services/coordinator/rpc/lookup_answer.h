// How a Lookup's answer goes on the wire (LookupResult in
// services/rpc/schema/coordinator.capnp), in one of two forms:
//
//  - full: one MatchedBlock per matched block, with its key and a Location per copy,
//    each naming its node. What a client that does not ask for the compact form gets.
//  - compact (LookupRequest.compactLocations): every node the locations name is listed
//    once in `nodes`; each location is one word (node index, tier, pool) in one flat
//    list, and `locationEnds` splits it by block. No key is echoed: the matched blocks
//    are the request's first keys. The lookup RPC bench's callgrind profile put the full
//    form's building at a third of the handler's instructions (a name copied per
//    location), which this form avoids.
//
// Either form is written into a results message sized from the answer itself, so that
// Cap'n Proto allocates one segment of the answer's size rather than its 8 KiB default.
//
// Thread safety: a LookupAnswerWriter is used by one thread at a time (the RPC server's
// event loop); it keeps scratch space between answers.
// Ownership: the writer refers to `coordinator` (its node names), which must outlive it.
#pragma once

#include <span>
#include <vector>

#include <capnp/message.h>
#include <kj/function.h>

#include "services/coordinator/cluster/coordinator.h"
#include "services/rpc/schema/coordinator.capnp.h"

namespace kvtier::coordinator {

enum class LookupAnswerForm { kFull, kCompact };

class LookupAnswerWriter {
 public:
  explicit LookupAnswerWriter(const Coordinator& coordinator) : coordinator_(coordinator) {}

  // Writes `result` (the lookup of `keys`) in `form` into the builder `init` returns;
  // `init` gets the size the answer takes (LookupResults and everything below it).
  // REQUIRES: result.matched_blocks <= keys.size(); every location's node is known to
  // the coordinator.
  void Write(const LookupResult& result, std::span<const BlockKey> keys, LookupAnswerForm form,
             kj::FunctionParam<rpc::schema::LookupResult::Builder(capnp::MessageSize)> init);

 private:
  static constexpr uint32_t kNotListed = UINT32_MAX;

  // The compact form's node table: every node `result` names, in order of first mention.
  void ListNodes(const LookupResult& result);
  uint64_t SizeInWords(const LookupResult& result, LookupAnswerForm form) const;
  void WriteCompact(const LookupResult& result, rpc::schema::LookupResult::Builder out) const;
  void WriteFull(const LookupResult& result, std::span<const BlockKey> keys,
                 rpc::schema::LookupResult::Builder out) const;
  void WriteBlock(const BlockKey& key, std::span<const Location> locations,
                  rpc::schema::MatchedBlock::Builder out) const;

  const Coordinator& coordinator_;
  std::vector<NodeId> nodes_;  // the current answer's node table
  std::vector<uint32_t>
      slot_of_;  // NodeId -> index in nodes_, or kNotListed; grows to the largest id seen
};

}  // namespace kvtier::coordinator
