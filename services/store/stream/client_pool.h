// DataStreamClientPool: kept connections to nodes' data streams, for callers that make
// many transfers (a worker's peer fetches, its write-through), so that a transfer does
// not pay a TCP connect.
//
// Transfer() runs one transfer on a kept connection (or a new one) and keeps the
// connection again unless it broke, after acking the replies it read (AckReplies, so
// that the node unpins the pages it lent them at once). A kept connection that the node
// closed meanwhile (it restarted) fails before the node saw the request, so the ticket
// is still good: the transfer is tried once more on a fresh connection, and the
// address's other kept connections, as stale, are dropped.
//
// Thread safety: safe from any thread (one mutex, a leaf, never held during a transfer).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "services/store/stream/data_stream_client.h"

namespace kvtier::store {

class DataStreamClientPool {
 public:
  // New connections are made with `connect` (its TLS, its timeout) to each call's address.
  // REQUIRES: max_idle_per_address >= 1.
  explicit DataStreamClientPool(size_t max_idle_per_address, DataStreamClientOptions connect = {})
      : max_idle_(max_idle_per_address), connect_(std::move(connect)) {}

  // `transfer(DataStreamClient&)` returns a Result<T> or a Status.
  template <typename Transfer>
  auto Run(const std::string& address, Transfer&& transfer)
      -> decltype(transfer(std::declval<DataStreamClient&>())) {
    bool kept = false;
    Result<std::unique_ptr<DataStreamClient>> client = Take(address, kept);
    if (!client.ok()) return client.status();
    auto result = transfer(**client);
    if (!StatusOf(result).ok() && kept && StatusOf(result).code() == StatusCode::kUnavailable) {
      Drop(address);
      client = Connect(address);
      if (!client.ok()) return client.status();
      result = transfer(**client);
    }
    Give(std::move(*client));
    return result;
  }

 private:
  template <typename T>
  static const Status& StatusOf(const Result<T>& result) {
    return result.status();
  }
  static const Status& StatusOf(const Status& status) { return status; }

  // A kept connection (`kept` set) or a new one.
  Result<std::unique_ptr<DataStreamClient>> Take(const std::string& address, bool& kept);
  // Keeps it unless it broke or the address has enough kept already.
  void Give(std::unique_ptr<DataStreamClient> client);
  void Drop(const std::string& address);
  Result<std::unique_ptr<DataStreamClient>> Connect(const std::string& address) const;

  const size_t max_idle_;
  const DataStreamClientOptions connect_;
  Mutex mu_;
  std::map<std::string, std::vector<std::unique_ptr<DataStreamClient>>> idle_
      KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::store
