#include "services/worker/pool_memory.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kvtier::worker {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

Result<std::string> RandomName() {
  unsigned char random[16];
  if (RAND_bytes(random, sizeof(random)) != 1) return InternalError("no random bytes for a shared-memory name");
  std::string name = "/kvtier-pool-";
  char hex[3];
  for (unsigned char byte : random) {
    std::snprintf(hex, sizeof(hex), "%02x", byte);
    name += hex;
  }
  return name;
}

// Closes the descriptor when it goes out of scope: the mapping outlives it.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<SharedPoolMemory> SharedPoolMemory::Create(size_t bytes) {
  if (bytes == 0) return InvalidArgumentError("shared pool memory of 0 bytes");
  KVTIER_ASSIGN_OR_RETURN(std::string name, RandomName());
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return UnavailableError(Errno("shm_open " + name));
  FdCloser closer{fd};
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::shm_unlink(name.c_str());
    return ResourceExhaustedError(Errno("sizing shared memory " + name + " to " + std::to_string(bytes) + " bytes"));
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    return ResourceExhaustedError(Errno("mapping " + std::to_string(bytes) + " bytes of shared memory " + name));
  }
  return SharedPoolMemory(std::move(name), data, bytes, /*owner=*/true);
}

Result<SharedPoolMemory> SharedPoolMemory::Map(const std::string& name, size_t bytes) {
  if (name.empty() || name[0] != '/' || name.find('/', 1) != std::string::npos) {
    return InvalidArgumentError("shared-memory name \"" + name + "\" must be one path component starting with '/'");
  }
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return errno == ENOENT ? NotFoundError("shared memory " + name + " does not exist (is the worker on this node "
                                           "and its IPC namespace shared?)")
                           : PermissionDeniedError(Errno("shm_open " + name));
  }
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return InternalError(Errno("fstat " + name));
  if (static_cast<size_t>(st.st_size) < bytes) {
    return FailedPreconditionError("shared memory " + name + " has " + std::to_string(st.st_size) + " bytes, not " +
                                   std::to_string(bytes));
  }
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return ResourceExhaustedError(Errno("mapping shared memory " + name));
  return SharedPoolMemory(name, data, bytes, /*owner=*/false);
}

SharedPoolMemory::SharedPoolMemory(SharedPoolMemory&& other) noexcept { *this = std::move(other); }

SharedPoolMemory& SharedPoolMemory::operator=(SharedPoolMemory&& other) noexcept {
  if (this != &other) {
    Release();
    name_ = std::move(other.name_);
    data_ = other.data_;
    size_ = other.size_;
    owner_ = other.owner_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.owner_ = false;
  }
  return *this;
}

SharedPoolMemory::~SharedPoolMemory() { Release(); }

void SharedPoolMemory::Release() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (owner_) ::shm_unlink(name_.c_str());
  data_ = nullptr;
  owner_ = false;
}

}  // namespace kvtier::worker
