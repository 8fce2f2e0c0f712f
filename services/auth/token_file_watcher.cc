#include "services/auth/token_file_watcher.h"

#include <sys/stat.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

namespace kvtier::auth {
namespace {

struct FileVersion {
  ino_t inode = 0;
  off_t size = -1;
  timespec modified{};
  friend bool operator==(const FileVersion& a, const FileVersion& b) {
    return a.inode == b.inode && a.size == b.size && a.modified.tv_sec == b.modified.tv_sec &&
           a.modified.tv_nsec == b.modified.tv_nsec;
  }
};

FileVersion VersionOf(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  return {st.st_ino, st.st_size, st.st_mtim};
}

}  // namespace

struct TokenFileWatcher::Impl {
  TokenFileWatcherOptions options;
  FileVersion seen;
  std::mutex mu;  // a leaf: guards `stop` for the wait
  std::condition_variable wake;
  bool stop = false;
  std::thread thread;

  void Run() {
    std::unique_lock lock(mu);
    while (!wake.wait_for(lock, options.interval, [this] { return stop; })) {
      const FileVersion now = VersionOf(options.tokens.path());
      if (now == seen) continue;
      seen = now;
      const Status reloaded = options.tokens.Reload();
      if (reloaded.ok()) {
        spdlog::info("auth.token_file {} reloaded: {} tenants, {} engines, {} node credentials",
                     options.tokens.path(), options.tokens.tenant_count(),
                     options.tokens.engine_count(), options.tokens.node_count());
      } else {
        spdlog::error("auth.token_file reload refused, the tokens in force stay: {}",
                      reloaded.message());
      }
    }
  }
};

Result<std::unique_ptr<TokenFileWatcher>> TokenFileWatcher::Create(
    TokenFileWatcherOptions options) {
  if (options.tokens.path().empty())
    return FailedPreconditionError("the token store was not read from a file");
  if (options.interval.count() <= 0)
    return InvalidArgumentError("the token file's reload interval must be positive");
  auto impl = std::make_unique<Impl>();
  impl->seen = VersionOf(options.tokens.path());
  impl->options = std::move(options);
  impl->thread = std::thread([raw = impl.get()] { raw->Run(); });
  return std::unique_ptr<TokenFileWatcher>(new TokenFileWatcher(std::move(impl)));
}

TokenFileWatcher::TokenFileWatcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TokenFileWatcher::~TokenFileWatcher() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

}  // namespace kvtier::auth
