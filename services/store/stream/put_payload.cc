#include "services/store/stream/put_payload.h"

#include <algorithm>
#include <string>

#include "storage/block_header.h"

namespace kvtier::store {

Result<std::vector<storage::PutItem>> StagedPutItems(std::span<const storage::BlockHeader> headers,
                                                     std::span<const uint8_t> staged,
                                                     uint64_t max_block_bytes) {
  std::vector<storage::PutItem> items;
  items.reserve(headers.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < headers.size(); ++i) {
    const storage::BlockHeader& header = headers[i];
    const auto payload = staged.subspan(offset, header.payload_bytes);
    offset += header.payload_bytes;
    if (Status valid = storage::ValidateBlock(header, payload, max_block_bytes); !valid.ok())
      return valid.WithContext("block " + std::to_string(i));
    items.push_back({header, payload, /*checksum_checked=*/true});
  }
  return items;
}

void ReservedPieces(const storage::HostReservation& reservation,
                    std::vector<asio::mutable_buffer>& out) {
  out.clear();
  for (size_t i = 0; i < reservation.headers().size(); ++i) {
    reservation.ForEachPiece(
        i, [&](std::span<uint8_t> piece) { out.emplace_back(piece.data(), piece.size()); });
  }
}

Status PutOutcome(std::span<const Status> results) {
  const auto cause = [](const Status& s) { return !s.ok() && s.code() != StatusCode::kAborted; };
  auto failed = std::find_if(results.begin(), results.end(), cause);
  if (failed == results.end())
    failed = std::find_if(results.begin(), results.end(), [](const Status& s) { return !s.ok(); });
  if (failed == results.end()) return Status::Ok();
  return failed->WithContext("block " + std::to_string(failed - results.begin()));
}

}  // namespace kvtier::store
