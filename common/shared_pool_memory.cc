#include "common/shared_pool_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>
#include <ctime>

#include <spdlog/spdlog.h>

namespace kvtier {
namespace {

constexpr std::string_view kPoolPrefix = "kvtier-pool-";

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

Result<std::string> RandomName() {
  unsigned char random[16];
  if (RAND_bytes(random, sizeof(random)) != 1)
    return InternalError("no random bytes for a shared-memory name");
  std::string name = "/" + std::string(kPoolPrefix);
  char hex[3];
  for (unsigned char byte : random) {
    std::snprintf(hex, sizeof(hex), "%02x", byte);
    name += hex;
  }
  return name;
}

// Closes the descriptor when it goes out of scope (unless released): the mapping outlives it.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

// Unlinks the pool `name` (under `dir`) when its creator's flock is gone; its size if so.
std::optional<uint64_t> RemoveIfStale(const std::string& dir, const std::string& name,
                                      std::chrono::seconds min_age) {
  const std::string path = dir + "/" + name;
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid())
    return std::nullopt;
  if (std::time(nullptr) - st.st_ctime < min_age.count()) return std::nullopt;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) return std::nullopt;  // its creator lives
  if (::unlink(path.c_str()) != 0) return std::nullopt;
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

SharedPoolMemory::Removed SharedPoolMemory::RemoveStale(const std::string& dir,
                                                        std::chrono::seconds min_age) {
  Removed removed;
  DIR* entries = ::opendir(dir.c_str());
  if (entries == nullptr) return removed;
  while (const dirent* entry = ::readdir(entries)) {
    const std::string name = entry->d_name;
    if (!name.starts_with(kPoolPrefix)) continue;
    if (const std::optional<uint64_t> bytes = RemoveIfStale(dir, name, min_age)) {
      ++removed.pools;
      removed.bytes += *bytes;
    }
  }
  ::closedir(entries);
  if (removed.pools > 0) {
    spdlog::info("removed {} shared pool(s) left in {} by processes that died ({} MiB)",
                 removed.pools, dir, removed.bytes >> 20);
  }
  return removed;
}

Result<SharedPoolMemory> SharedPoolMemory::Create(size_t bytes) {
  if (bytes == 0) return InvalidArgumentError("shared pool memory of 0 bytes");
  RemoveStale();
  KVTIER_ASSIGN_OR_RETURN(std::string name, RandomName());
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return UnavailableError(Errno("shm_open " + name));
  FdCloser closer{fd};
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::shm_unlink(name.c_str());
    return UnavailableError(Errno("locking shared memory " + name));
  }
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::shm_unlink(name.c_str());
    return ResourceExhaustedError(
        Errno("sizing shared memory " + name + " to " + std::to_string(bytes) + " bytes"));
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    return ResourceExhaustedError(
        Errno("mapping " + std::to_string(bytes) + " bytes of shared memory " + name));
  }
  return SharedPoolMemory(std::move(name), data, bytes, /*lock_fd=*/closer.release());
}

Result<SharedPoolMemory> SharedPoolMemory::Map(const std::string& name, size_t bytes) {
  if (name.empty() || name[0] != '/' || name.find('/', 1) != std::string::npos) {
    return InvalidArgumentError("shared-memory name \"" + name +
                                "\" must be one path component starting with '/'");
  }
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return errno == ENOENT ? NotFoundError("shared memory " + name +
                                           " does not exist (is the worker on this node "
                                           "and its IPC namespace shared?)")
                           : PermissionDeniedError(Errno("shm_open " + name));
  }
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return InternalError(Errno("fstat " + name));
  if (static_cast<size_t>(st.st_size) < bytes) {
    return FailedPreconditionError("shared memory " + name + " has " + std::to_string(st.st_size) +
                                   " bytes, not " + std::to_string(bytes));
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return ResourceExhaustedError(Errno("mapping shared memory " + name));
  return SharedPoolMemory(name, data, bytes, /*lock_fd=*/-1);
}

SharedPoolMemory::SharedPoolMemory(SharedPoolMemory&& other) noexcept { *this = std::move(other); }

SharedPoolMemory& SharedPoolMemory::operator=(SharedPoolMemory&& other) noexcept {
  if (this != &other) {
    Release();
    name_ = std::move(other.name_);
    data_ = other.data_;
    size_ = other.size_;
    owner_ = other.owner_;
    lock_fd_ = other.lock_fd_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.owner_ = false;
    other.lock_fd_ = -1;
  }
  return *this;
}

SharedPoolMemory::~SharedPoolMemory() { Release(); }

void SharedPoolMemory::Release() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (owner_) ::shm_unlink(name_.c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);
  data_ = nullptr;
  owner_ = false;
  lock_fd_ = -1;
}

}  // namespace kvtier
