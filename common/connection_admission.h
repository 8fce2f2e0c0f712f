// ConnectionAdmission: which connections a listener takes, and which it sheds first.
//
// Every accepted connection is admitted or refused here before a byte of it is read. A
// connection is "unauthenticated" from its accept until Authenticated(); those are kept in
// accept order, and counted per source address. Admit() refuses a connection whose
// address already has `max_unauthenticated_per_address` waiting; otherwise, while the
// listener is at `max_connections` open or `max_unauthenticated` waiting, it sheds the
// oldest unauthenticated connection (calls its Shed callback) to make room, and refuses
// the new one only when there is none left to shed. ShedOldest() is the same step for a
// listener whose accept failed for want of descriptors.
//
// A shed connection leaves the waiting list at once and counts as open until its owner
// calls Closed() (which every admitted connection must get exactly once), but not against
// max_connections: its descriptor is on its way back, so the newcomer takes its place.
//
// Thread safety: none (a listener serving several threads locks it). Shed callbacks run inside
// Admit()/ShedOldest() and must not call back into this object.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace kvtier {

struct ConnectionAdmissionOptions {
  uint32_t max_connections = 16384;
  uint32_t max_unauthenticated = 1024;
  uint32_t max_unauthenticated_per_address = 64;
};

class ConnectionAdmission {
 public:
  using Id = uint64_t;
  using Shed = std::function<void()>;

  enum class Verdict { kAdmitted, kRefusedAddress, kRefusedFull };
  struct Admitted {
    Verdict verdict = Verdict::kAdmitted;
    Id id = 0;          // kAdmitted only
    uint32_t shed = 0;  // connections shed to make room
  };

  // REQUIRES: every limit >= 1.
  explicit ConnectionAdmission(ConnectionAdmissionOptions options) : options_(options) {}

  // A new connection from `address` ("10.0.0.7", "unix"), unauthenticated; `shed` closes it.
  Admitted Admit(const std::string& address, Shed shed);
  // It authenticated: no longer shed, no longer counted against its address.
  void Authenticated(Id id);
  // It closed, for any reason (shed included).
  void Closed(Id id);
  // Sheds the oldest unauthenticated connection; false when none is waiting.
  bool ShedOldest();

  uint32_t open() const { return open_; }
  uint32_t unauthenticated() const { return static_cast<uint32_t>(waiting_.size()); }

 private:
  struct Waiting {
    Id id = 0;
    std::string address;
    Shed shed;
  };
  using WaitingList = std::list<Waiting>;
  void Forget(WaitingList::iterator it);

  const ConnectionAdmissionOptions options_;
  Id next_id_ = 1;
  uint32_t open_ = 0;
  WaitingList waiting_;  // oldest first
  std::unordered_map<Id, WaitingList::iterator> by_id_;
  std::unordered_map<std::string, uint32_t> per_address_;
  std::unordered_set<Id> shedding_;  // shed, not yet Closed()
};

}  // namespace kvtier
