// StreamSession: what the keyed transfers of one data stream session run under
// (protocol.h: keyed gets and keyed puts), as the node's control call opened it.
//
// A get session (kGetKeys) looks blocks up under its format tag and salt scope: in the
// node's tiers, then those the tiers lack in the session's `extra` source where it names
// one (a worker's pool). A put session (kPutHeaders) stores blocks of any format under
// its salt scope (a header naming scope 0 means the session's), or under the scope each
// header names where `any_scope` (the session was opened with a node's credential). A
// get session with `any_scope` has its replies' host-tier pages lent (sent zero copy) to
// a client that acks (protocol.h): such a reader may read every block anyway, so a reader
// that lies in its acks learns nothing it could not ask for.
// Either carries at most `max_blocks` blocks per transfer: the node's per-call limit, as
// its Cap'n Proto calls.
//
// Thread safety: immutable once opened; shared by the transfers using it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/block_key.h"
#include "services/store/extra_block_source.h"
#include "services/store/stream/protocol.h"

namespace kvtier::store {

struct StreamSession {
  StreamOp op = StreamOp::kGetKeys;  // kGetKeys or kPutHeaders: the one operation it serves
  std::string format_tag = {};       // kGetKeys
  uint64_t salt_scope = 0;
  bool any_scope = false;  // opened with a node's credential
  // A tenant's key space (common/block_key.h): the keys a transfer names and the headers
  // it sends are salted on the way in; replies name the client's own keys.
  KeySalt salt = {};
  uint32_t max_blocks = kMaxStreamKeys;  // per transfer; 1 to kMaxStreamKeys
  // Called with each transfer's keys (a node's admission filter counting requests), on
  // the stream's loops: must be thread-safe. Optional.
  std::function<void(std::span<const BlockKey>)> on_request = {};
  // kGetKeys, optional: where the blocks the tiers lack are read. Called from the
  // stream's threads (off its event loops): must be thread-safe, and may wait.
  std::shared_ptr<ExtraBlockSource> extra = {};
};

}  // namespace kvtier::store
