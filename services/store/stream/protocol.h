// The data stream: how a node's block payloads travel beside the Cap'n Proto control
// calls (services/rpc/schema/store.capnp, BlockStore.openGet / openPut).
//
// Control stays on Cap'n Proto: openGet/openPut check the session's rights, the headers
// and the bounds, and answer a TransferTicket. The bytes then travel on a plain TCP
// connection to the ticket's `data_address`, with no framing per block and no copy into
// a message: the sender writes straight from its buffers (gather) and the receiver reads
// straight into its own (scatter). A connection carries any number of transfers, one at
// a time. All integers are little-endian.
//
//   request  StreamRequest{magic, op, ticket id, ticket secret}
//            put: then exactly the ticket's total_bytes, the payloads in header order
//   reply    StreamReply{magic, code, message_bytes, blocks, payload_bytes}
//            then `message_bytes` of error text (code != 0: the connection is closed)
//            get: then `blocks` StreamBlockState bytes, padded to a multiple of 8,
//                 then the payloads of the blocks whose state is kPresent, in order
//            put: `blocks` is the number of blocks stored
//
// A keyed get (kGetKeys) names its blocks on the stream instead of in an openGet call: its
// ticket is a get session (BlockStore.openGetSession), good for any number of keyed gets
// on any connection while it is used at least once per ticket ttl, each under the
// session's format tag and salt scope. Why: an openGet per get was a Cap'n Proto round
// trip per transfer and a busy RPC thread
// (docs/history/benchmarks-2026-11.md#keyed-gets-under-a-get-session-and-at-least-two-stream-loops-2026-11-24-stop-29).
//   request  StreamRequest{magic, kGetKeys, session id, session secret}
//            StreamKeysHead{count, acked}, then `count` keys (u64 hi, u64 lo), count <=
//            kMaxStreamKeys
//   reply    StreamReply as for get (`blocks` = count), then u64 header_bytes, then the
//            `blocks` state bytes padded to a multiple of 8, then `header_bytes` of the
//            present blocks' headers in order (storage/block_header.h's encoding, the
//            headers of exactly the bytes sent), then their payloads
// `acked` is 0, or kStreamAcksReplies | the number of keyed-get replies (successful ones)
// the client has read whole on this connection, mod 2^31. A client that acks lets a node
// send its host tier's pages zero copy to a session opened with a node's credential: the
// kernel reads those pages until the client has read them, and the node writes them
// again only once the client says so (or after replacing their memory, when it does not
// say so soon: DataStreamServerOptions::lent_grace). A client about to leave the
// connection idle says it at once, so that the node need not wait:
//   ack      StreamRequest{magic, kAck, ticket_id = acked (as above, flag set), secret 0};
//            no reply
//
// A keyed put (kPutHeaders) likewise carries its headers on the stream instead of in an
// openPut call, under a put session (BlockStore.openPutSession), for the same reason. A
// header's salt scope 0 stands for the session's; another scope is refused unless the
// session was opened with a node's credential (as openPut's headers).
//   request  StreamRequest{magic, kPutHeaders, session id, session secret}
//            StreamHeadersHead{count, header_bytes}, then `header_bytes` of headers
//            (block_header.h's encoding, back to back), then the payloads in header order;
//            count <= kMaxStreamKeys, header_bytes <= count * kMaxEncodedHeaderBytes
//   reply    as put
//
// A ticket is good for one transfer, on any connection, until it expires (seconds); its
// secret (64 bits from the kernel's CSPRNG) is the stream's only credential, handed out
// over the authenticated control call. The stream is not encrypted: a node whose RPC
// uses TLS does not open one (its openGet/openPut answer UNIMPLEMENTED and callers use
// the inline get/put).
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvtier::store {

static_assert(std::endian::native == std::endian::little,
              "the data stream's framing is little-endian");

struct TransferTicket {
  uint64_t id = 0;
  uint64_t secret = 0;
  std::string data_address;  // "host:port"
  uint64_t total_bytes = 0;  // put: exactly this; get: at most this
};

enum class StreamOp : uint32_t { kGet = 1, kPut = 2, kGetKeys = 3, kPutHeaders = 4, kAck = 5 };

// A put of either kind (a ticket's, or a put session's keyed put).
inline constexpr bool IsPut(StreamOp op) {
  return op == StreamOp::kPut || op == StreamOp::kPutHeaders;
}

enum class StreamBlockState : uint8_t {
  kPresent = 0,
  kMissing = 1,  // not held when the ticket was opened
  kCorrupt = 2,  // failed its checksum on the node: deleted, DATA_LOSS
};

inline constexpr uint32_t kStreamMagic = 0x3144564Bu;  // "KVD1"

struct StreamRequest {
  uint32_t magic = kStreamMagic;
  uint32_t op = 0;
  uint64_t ticket_id = 0;
  uint64_t secret = 0;
};
static_assert(sizeof(StreamRequest) == 24);

struct StreamReply {
  uint32_t magic = kStreamMagic;
  uint32_t code = 0;  // a kvtier StatusCode
  uint32_t message_bytes = 0;
  uint32_t blocks = 0;
  uint64_t payload_bytes = 0;
};
static_assert(sizeof(StreamReply) == 24);

inline constexpr uint32_t kMaxStreamMessageBytes = 4096;

struct StreamKeysHead {
  uint32_t count = 0;
  uint32_t acked = 0;  // 0, or kStreamAcksReplies | replies read whole (mod 2^31)
};
inline constexpr uint32_t kStreamAcksReplies = 1u << 31;
inline constexpr uint32_t kStreamAckedMask = kStreamAcksReplies - 1;
static_assert(sizeof(StreamKeysHead) == 8);
inline constexpr uint32_t kMaxStreamKeys = 4096;

struct StreamHeadersHead {
  uint32_t count = 0;
  uint32_t header_bytes = 0;
};
static_assert(sizeof(StreamHeadersHead) == 8);

// A data stream address, "host:port" or "[v6]:port", split (brackets removed); nullopt
// when it names no port.
struct HostPort {
  std::string host;
  std::string port;
};
inline std::optional<HostPort> SplitHostPort(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == address.size()) return std::nullopt;
  std::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return HostPort{std::string(host), std::string(address.substr(colon + 1))};
}

// The state bytes of a get reply, padded so that the payloads start 8-byte aligned.
inline constexpr uint64_t PaddedStateBytes(uint32_t blocks) {
  return (uint64_t{blocks} + 7) / 8 * 8;
}

}  // namespace kvtier::store
