#include "services/store/stream/client_pool.h"
#include "common/mutex.h"

namespace kvtier::store {

Result<std::unique_ptr<DataStreamClient>> DataStreamClientPool::Take(const std::string& address,
                                                                     bool& kept) {
  {
    MutexLock lock(mu_);
    auto& idle = idle_[address];
    kept = !idle.empty();
    if (kept) {
      std::unique_ptr<DataStreamClient> client = std::move(idle.back());
      idle.pop_back();
      return client;
    }
  }
  return Connect(address);
}

Result<std::unique_ptr<DataStreamClient>> DataStreamClientPool::Connect(
    const std::string& address) const {
  DataStreamClientOptions options = connect_;
  options.address = address;
  return DataStreamClient::Connect(options);
}

void DataStreamClientPool::Give(std::unique_ptr<DataStreamClient> client) {
  // Idle from now on: the node may unpin at once the pages it lent to the replies read.
  if (!client->broken()) (void)client->AckReplies();  // a failure breaks it: not kept
  if (client->broken()) return;
  MutexLock lock(mu_);
  auto& idle = idle_[client->address()];
  if (idle.size() < max_idle_) idle.push_back(std::move(client));
}

void DataStreamClientPool::Drop(const std::string& address) {
  MutexLock lock(mu_);
  idle_.erase(address);
}

}  // namespace kvtier::store
