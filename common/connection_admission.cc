#include "common/connection_admission.h"

#include <utility>

namespace kvtier {

ConnectionAdmission::Admitted ConnectionAdmission::Admit(const std::string& address, Shed shed) {
  Admitted result;
  if (const auto it = per_address_.find(address);
      it != per_address_.end() && it->second >= options_.max_unauthenticated_per_address) {
    result.verdict = Verdict::kRefusedAddress;
    return result;
  }
  // A shed connection is still open until it closes, but it no longer counts against the
  // limit: its descriptor is on its way back.
  while (open_ - shedding_.size() >= options_.max_connections ||
         waiting_.size() >= options_.max_unauthenticated) {
    if (!ShedOldest()) {
      result.verdict = Verdict::kRefusedFull;
      return result;
    }
    ++result.shed;
  }
  result.id = next_id_++;
  ++open_;
  ++per_address_[address];
  waiting_.push_back(Waiting{result.id, address, std::move(shed)});
  by_id_.emplace(result.id, std::prev(waiting_.end()));
  return result;
}

void ConnectionAdmission::Forget(WaitingList::iterator it) {
  if (const auto count = per_address_.find(it->address);
      count != per_address_.end() && --count->second == 0) {
    per_address_.erase(count);
  }
  by_id_.erase(it->id);
  waiting_.erase(it);
}

void ConnectionAdmission::Authenticated(Id id) {
  if (const auto it = by_id_.find(id); it != by_id_.end()) Forget(it->second);
}

void ConnectionAdmission::Closed(Id id) {
  Authenticated(id);
  shedding_.erase(id);
  if (open_ > 0) --open_;
}

bool ConnectionAdmission::ShedOldest() {
  if (waiting_.empty()) return false;
  Shed shed = std::move(waiting_.front().shed);
  shedding_.insert(waiting_.front().id);
  Forget(waiting_.begin());
  if (shed) shed();
  return true;
}

}  // namespace kvtier
