// ScopeRegistry: dense ScopeIds for the 64-bit salt scopes that travel on the wire.
//
// The index stores a 2-byte scope per block; events and sessions carry SaltScope(salt)
// (common/block_key.h). Writers (stored events, snapshots) intern scopes; readers (lookups)
// only find them, so a lookup under a scope nobody wrote matches nothing and allocates
// nothing.
//
// Thread safety: none; owned by the coordinator's event-loop thread.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>

#include "common/status.h"
#include "services/coordinator/index/block_index.h"

namespace kvtier::coordinator {

class ScopeRegistry {
 public:
  // kResourceExhausted past 65,535 distinct scopes.
  [[nodiscard]] Result<ScopeId> Intern(uint64_t salt_scope) {
    if (auto it = ids_.find(salt_scope); it != ids_.end()) return it->second;
    if (ids_.size() >= UINT16_MAX) return ResourceExhaustedError("more than 65535 salt scopes");
    const ScopeId id = static_cast<ScopeId>(ids_.size());
    ids_.emplace(salt_scope, id);
    return id;
  }
  std::optional<ScopeId> Find(uint64_t salt_scope) const {
    auto it = ids_.find(salt_scope);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::unordered_map<uint64_t, ScopeId> ids_;
};

}  // namespace kvtier::coordinator
