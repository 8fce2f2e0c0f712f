#include "services/store/rpc/block_header_wire.h"

#include "services/rpc/schema_convert.h"

namespace kvtier::store {

Result<storage::BlockHeader> FromWire(rpc::schema::BlockHeader::Reader h, uint64_t scope) {
  storage::BlockHeader header;
  header.key = rpc::ToKey(h.getKey());
  header.parent = rpc::ToKey(h.getParent());
  header.first_in_chain = h.getFirstInChain();
  KVTIER_ASSIGN_OR_RETURN(header.format_tag, storage::FormatTag::Intern({h.getFormatTag().cStr(),
                                                                         h.getFormatTag().size()}));
  header.salt_scope = scope;
  header.checksum = h.getChecksum();
  header.payload_bytes = h.getPayloadBytes();
  header.priority = h.getPriority();
  header.retention_left_ms = h.getRetentionLeftMs();
  return header;
}

void ToWire(const storage::BlockHeader& header, rpc::schema::BlockHeader::Builder h) {
  rpc::FromKey(header.key, h.initKey());
  rpc::FromKey(header.parent, h.initParent());
  h.setFirstInChain(header.first_in_chain);
  h.setFormatTag(header.format_tag.str());
  h.setSaltScope(header.salt_scope);
  h.setChecksum(header.checksum);
  h.setPayloadBytes(header.payload_bytes);
  h.setPriority(header.priority);
  h.setRetentionLeftMs(header.retention_left_ms);
}

TransferTicket FromWire(rpc::schema::TransferTicket::Reader t) {
  return {t.getId(), t.getSecret(), t.getDataAddress().cStr(), t.getTotalBytes()};
}

void ToWire(const TransferTicket& ticket, rpc::schema::TransferTicket::Builder t) {
  t.setId(ticket.id);
  t.setSecret(ticket.secret);
  t.setDataAddress(ticket.data_address);
  t.setTotalBytes(ticket.total_bytes);
}

}  // namespace kvtier::store
