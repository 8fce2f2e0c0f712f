#include "services/store/stream/ticket_table.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace kvtier::store {
namespace {

Result<uint64_t> RandomSecret() {
  uint64_t secret = 0;
  if (getrandom(&secret, sizeof(secret), 0) != static_cast<ssize_t>(sizeof(secret))) {
    return UnavailableError(std::string("getrandom failed: ") + std::strerror(errno));
  }
  return secret;
}

}  // namespace

// Lock order: the table's mutex, then the staging pool's (a dropped ticket returns its
// buffer while the table is locked).
Result<TicketTable::Added> TicketTable::Add(OpenTransfer transfer) {
  KVTIER_ASSIGN_OR_RETURN(const uint64_t secret, RandomSecret());
  std::lock_guard lock(mu_);
  SweepLocked();
  const uint64_t id = next_id_++;
  open_.emplace(id, Entry{secret, std::move(transfer)});
  deadlines_.emplace_back(clock_.Now() + ttl_, id);
  return Added{id, secret};
}

Result<OpenTransfer> TicketTable::Take(uint64_t id, uint64_t secret, StreamOp op) {
  std::lock_guard lock(mu_);
  SweepLocked();
  auto it = open_.find(id);
  if (it == open_.end()) return NotFoundError("ticket " + std::to_string(id) + " is unknown or expired");
  if (it->second.secret != secret) {
    open_.erase(it);
    return PermissionDeniedError("ticket " + std::to_string(id) + ": wrong secret; the ticket is withdrawn");
  }
  if (it->second.transfer.op != op) {
    return InvalidArgumentError("ticket " + std::to_string(id) + " was opened for a " +
                                (it->second.transfer.op == StreamOp::kGet ? "get" : "put"));
  }
  OpenTransfer transfer = std::move(it->second.transfer);
  open_.erase(it);
  return transfer;
}

size_t TicketTable::Sweep() {
  std::lock_guard lock(mu_);
  return SweepLocked();
}

size_t TicketTable::SweepLocked() {
  const Nanos now = clock_.Now();
  size_t dropped = 0;
  while (!deadlines_.empty() && deadlines_.front().first <= now) {
    // A ticket already taken left its deadline behind; only open ones count as expired.
    dropped += open_.erase(deadlines_.front().second);
    deadlines_.pop_front();
  }
  expired_ += dropped;
  return dropped;
}

void TicketTable::Drop() {
  std::lock_guard lock(mu_);
  open_.clear();
  deadlines_.clear();
}

size_t TicketTable::size() const {
  std::lock_guard lock(mu_);
  return open_.size();
}

uint64_t TicketTable::expired() const {
  std::lock_guard lock(mu_);
  return expired_;
}

}  // namespace kvtier::store
