#include "services/store/stream/ticket_table.h"
#include "common/mutex.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace kvtier::store {
namespace {

Result<TicketTable::Added> RandomIdAndSecret() {
  uint64_t words[2] = {};
  if (getrandom(words, sizeof(words), 0) != static_cast<ssize_t>(sizeof(words))) {
    return UnavailableError(std::string("getrandom failed: ") + std::strerror(errno));
  }
  return TicketTable::Added{words[0], words[1]};
}

// Compares secrets in time independent of where they differ.
bool SameSecret(uint64_t a, uint64_t b) {
  volatile uint64_t difference = a ^ b;
  return difference == 0;
}

// The entry of `id` among `entries` (the tickets, or the sessions), its secret checked:
// kNotFound, kInvalidArgument when the id is one of the other kind (`of_other_kind`), and
// kPermissionDenied for a wrong secret. A wrong secret leaves the entry to its owner: ids
// are random, so whoever sends one it was not given is guessing 128 bits, not 64.
template <typename Entries>
Result<typename Entries::iterator> FindWithSecret(Entries& entries, uint64_t id, uint64_t secret,
                                                  bool of_other_kind, const std::string& kind,
                                                  const std::string& other_kind) {
  const auto it = entries.find(id);
  if (it == entries.end()) {
    if (of_other_kind)
      return InvalidArgumentError(kind + " " + std::to_string(id) + " is " + other_kind);
    return NotFoundError(kind + " " + std::to_string(id) + " is unknown or expired");
  }
  if (!SameSecret(it->second.secret, secret)) {
    return PermissionDeniedError(kind + " " + std::to_string(id) + ": wrong secret");
  }
  return it;
}

}  // namespace

// Lock order: the table's mutex, then the staging pool's (a dropped ticket returns its
// buffer while the table is locked).
Result<TicketTable::Added> TicketTable::Add(OpenTransfer transfer) {
  MutexLock lock(mu_);
  SweepLocked();
  KVTIER_ASSIGN_OR_RETURN(const Added added, FreshIdLocked());
  open_.emplace(added.id, Entry{added.secret, std::move(transfer)});
  deadlines_.emplace_back(clock_.Now() + ttl_, added.id);
  return added;
}

Result<TicketTable::Added> TicketTable::FreshIdLocked() const {
  while (true) {
    KVTIER_ASSIGN_OR_RETURN(const Added added, RandomIdAndSecret());
    if (added.id != 0 && !open_.contains(added.id) && !sessions_.contains(added.id)) return added;
  }
}

Result<OpenTransfer> TicketTable::Take(uint64_t id, uint64_t secret, StreamOp op) {
  MutexLock lock(mu_);
  SweepLocked();
  KVTIER_ASSIGN_OR_RETURN(const auto it,
                          FindWithSecret(open_, id, secret, sessions_.contains(id), "ticket",
                                         "a session: it serves keyed transfers only"));
  if (it->second.transfer.op != op) {
    return InvalidArgumentError("ticket " + std::to_string(id) + " was opened for a " +
                                (it->second.transfer.op == StreamOp::kGet ? "get" : "put"));
  }
  OpenTransfer transfer = std::move(it->second.transfer);
  open_.erase(it);
  return transfer;
}

Result<TicketTable::Added> TicketTable::AddSession(StreamSession session) {
  MutexLock lock(mu_);
  if (sessions_.size() >= kMaxSessions) {
    return ResourceExhaustedError("the data stream has " + std::to_string(sessions_.size()) +
                                  " sessions open, its limit; reuse one");
  }
  KVTIER_ASSIGN_OR_RETURN(const Added added, FreshIdLocked());
  sessions_.emplace(
      added.id,
      SessionEntry{added.secret, std::make_shared<const StreamSession>(std::move(session)),
                   clock_.Now()});
  return added;
}

Result<std::shared_ptr<const StreamSession>> TicketTable::UseSession(uint64_t id, uint64_t secret,
                                                                     StreamOp op) {
  MutexLock lock(mu_);
  const Nanos now = clock_.Now();
  if (const auto idle = sessions_.find(id);
      idle != sessions_.end() && idle->second.last_used + ttl_ <= now) {
    sessions_.erase(idle);  // idle past its ttl: expired
  }
  KVTIER_ASSIGN_OR_RETURN(const auto it,
                          FindWithSecret(sessions_, id, secret, open_.contains(id), "session",
                                         "a transfer's ticket, not a session"));
  if (it->second.session->op != op) {
    return InvalidArgumentError("session " + std::to_string(id) + " serves keyed " +
                                (it->second.session->op == StreamOp::kGetKeys ? "gets" : "puts") +
                                " only");
  }
  it->second.last_used = now;
  return it->second.session;
}

size_t TicketTable::Sweep() {
  MutexLock lock(mu_);
  const Nanos now = clock_.Now();
  const size_t idle = std::erase_if(
      sessions_, [&](const auto& entry) { return entry.second.last_used + ttl_ <= now; });
  return SweepLocked() + idle;
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
  MutexLock lock(mu_);
  open_.clear();
  deadlines_.clear();
  sessions_.clear();
}

size_t TicketTable::sessions() const {
  MutexLock lock(mu_);
  return sessions_.size();
}

size_t TicketTable::size() const {
  MutexLock lock(mu_);
  return open_.size();
}

uint64_t TicketTable::expired() const {
  MutexLock lock(mu_);
  return expired_;
}

}  // namespace kvtier::store
