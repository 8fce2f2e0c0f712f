// TokenFileWatcher: reloads a TokenStore when its file changes.
//
// Every `interval` a thread of its own compares the file's inode, size and modification
// time with what it last read (a Kubernetes Secret's mount swaps a symlink, which changes
// the inode) and, on a change, calls TokenStore::Reload. A file that does not parse is
// logged, naming the entry and field, and the tokens in force stay as they were.
//
// Thread safety: Create and the destructor from one thread; the store is safe from any.
// Ownership: holds a copy of the store, which shares its entries with every other copy.
#pragma once

#include <chrono>
#include <memory>

#include "services/auth/token_store.h"

namespace kvtier::auth {

struct TokenFileWatcherOptions {
  TokenStore tokens = TokenStore::Disabled();  // made by TokenStore::FromFile
  std::chrono::milliseconds interval{1000};
};

class TokenFileWatcher {
 public:
  // kFailedPrecondition for a store not read from a file; kInvalidArgument for an interval of 0.
  [[nodiscard]] static Result<std::unique_ptr<TokenFileWatcher>> Create(
      TokenFileWatcherOptions options);
  ~TokenFileWatcher();
  TokenFileWatcher(const TokenFileWatcher&) = delete;
  TokenFileWatcher& operator=(const TokenFileWatcher&) = delete;

 private:
  struct Impl;
  explicit TokenFileWatcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::auth
