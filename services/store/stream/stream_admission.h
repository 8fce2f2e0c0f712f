// StreamAdmission: which connections a data stream takes, and which it sheds first
// (common/connection_admission.h), for connections that live on several loops.
//
// A connection counts as unauthenticated until it shows a valid ticket or session
// (Proven). At max_connections open, or max_unauthenticated waiting, the oldest waiting one
// is shed for a newcomer; an address with max_unauthenticated_per_address waiting has its
// newcomers refused.
//
// Thread safety: safe from any thread (one mutex). A Shed callback runs under it, so it
// must only post work to the connection's loop, never call back in nor hold the
// connection (whose destructor calls Closed()).
#pragma once

#include <string>

#include "common/connection_admission.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace kvtier::store {

class StreamAdmission {
 public:
  explicit StreamAdmission(ConnectionAdmissionOptions options) : admission_(options) {}

  ConnectionAdmission::Admitted Admit(const std::string& address, ConnectionAdmission::Shed shed) {
    MutexLock lock(mu_);
    return admission_.Admit(address, std::move(shed));
  }
  void Proven(ConnectionAdmission::Id id) {
    MutexLock lock(mu_);
    admission_.Authenticated(id);
  }
  void Closed(ConnectionAdmission::Id id) {
    MutexLock lock(mu_);
    admission_.Closed(id);
  }
  bool ShedOldest() {
    MutexLock lock(mu_);
    return admission_.ShedOldest();
  }

 private:
  Mutex mu_;  // a leaf but for the shed callbacks' posts
  ConnectionAdmission admission_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::store
