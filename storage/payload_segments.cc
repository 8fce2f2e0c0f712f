#include "storage/payload_segments.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/iovec.h"
#include "storage/fast_xxh3.h"

namespace kvtier::storage {
namespace {

// Reads are hashed chunk by chunk while the chunk is still in cache.
constexpr size_t kReadChunkBytes = size_t{256} * 1024;
constexpr uint64_t kMaxOffset = uint64_t{1} << 40;
constexpr uint32_t kMaxSegmentId = (1u << 24) - 1;  // 24 bits of a location

Status IoError(const std::string& what, int error) {
  const std::string message = what + ": " + std::strerror(error);
  if (error == ENOSPC || error == EDQUOT) return ResourceExhaustedError("disk full: " + message);
  if (error == EACCES || error == EPERM || error == EROFS) return PermissionDeniedError(message);
  return UnavailableError(message);
}

std::string SegmentPath(const std::string& dir, uint32_t id) {
  char name[32];
  std::snprintf(name, sizeof(name), "%08u.seg", id);
  return (std::filesystem::path(dir) / name).string();
}

// The id of a segment file's name ("00000042.seg"), or 0 for any other file.
uint32_t SegmentId(const std::filesystem::path& path) {
  if (path.extension() != ".seg") return 0;
  const std::string stem = path.stem().string();
  if (stem.empty() || stem.size() > 8 || !std::all_of(stem.begin(), stem.end(), ::isdigit))
    return 0;
  const unsigned long id = std::stoul(stem);
  return id <= kMaxSegmentId ? static_cast<uint32_t>(id) : 0;
}

Status SyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError("opening " + dir, errno);
  const int synced = fsync(fd);
  const int error = errno;
  close(fd);
  if (synced != 0) return IoError("syncing " + dir, error);
  return Status::Ok();
}

}  // namespace

SegmentFile::~SegmentFile() { close(fd_); }

Result<uint64_t> SegmentFile::ReadHashed(uint64_t offset, std::span<uint8_t> out) const {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  size_t done = 0;
  while (done < out.size()) {
    const size_t want = std::min(kReadChunkBytes, out.size() - done);
    const ssize_t got = pread(fd_, out.data() + done, want, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int error = got < 0 ? errno : 0;
      return got < 0
                 ? IoError("reading " + path_, error)
                 : UnavailableError("reading " + path_ + ": the file ends before the payload does");
    }
    XXH3_64bits_update(&state, out.data() + done, static_cast<size_t>(got));
    done += static_cast<size_t>(got);
  }
  return XXH3_64bits_digest(&state);
}

Result<std::unique_ptr<PayloadSegments>> PayloadSegments::Open(PayloadSegmentsOptions options) {
  std::error_code error;
  std::filesystem::create_directories(options.dir, error);
  if (error) {
    const std::string message =
        "cannot create the payload directory " + options.dir + ": " + error.message();
    return error == std::errc::permission_denied ? PermissionDeniedError(message)
                                                 : FailedPreconditionError(message);
  }
  std::unique_ptr<PayloadSegments> segments(new PayloadSegments(std::move(options)));
  for (const auto& entry : std::filesystem::directory_iterator(segments->options_.dir, error)) {
    const uint32_t id = SegmentId(entry.path());
    if (id == 0) continue;
    const int fd = open(entry.path().c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return IoError("opening " + entry.path().string(), errno);
    struct stat st {};
    fstat(fd, &st);
    Segment& segment = segments->segments_[id];
    segment.file = std::make_shared<SegmentFile>(id, entry.path().string(), fd);
    segment.size = static_cast<uint64_t>(st.st_size);
    segments->file_bytes_ += segment.size;
    segments->next_id_ = std::max(segments->next_id_, id % kMaxSegmentId + 1);
  }
  if (error)
    return FailedPreconditionError("cannot list " + segments->options_.dir + ": " +
                                   error.message());
  return segments;
}

PayloadSegments::~PayloadSegments() = default;

bool PayloadSegments::AddLive(uint64_t location, uint64_t bytes) {
  const auto it = segments_.find(SegmentOf(location));
  if (it == segments_.end() || OffsetOf(location) + bytes > it->second.size) return false;
  it->second.live += bytes;
  live_bytes_ += bytes;
  return true;
}

void PayloadSegments::DropUnreferenced() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    auto next = std::next(it);
    if (it->second.live == 0) Delete(it);
    it = next;
  }
}

Status PayloadSegments::StartSegment() {
  // Ids are reused once their segment is gone: a location names a segment only while a
  // block lives in it, so 2^24 ids never run out (they would after 1 PiB of writes).
  if (segments_.size() >= kMaxSegmentId)
    return ResourceExhaustedError("the disk tier has no free segment id");
  while (segments_.contains(next_id_)) next_id_ = next_id_ % kMaxSegmentId + 1;
  const uint32_t id = next_id_;
  next_id_ = next_id_ % kMaxSegmentId + 1;
  const std::string path = SegmentPath(options_.dir, id);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return IoError("creating " + path, errno);
  segments_[id].file = std::make_shared<SegmentFile>(id, path, fd);
  active_ = id;
  dir_unsynced_ = true;
  return Status::Ok();
}

Result<PayloadSegments::Reservation> PayloadSegments::Reserve(std::span<const uint64_t> sizes) {
  uint64_t total = 0;
  for (const uint64_t size : sizes) total += size;
  if (active_ && segments_.at(*active_).size > 0 &&
      segments_.at(*active_).size + total > options_.segment_bytes) {
    const auto sealed = segments_.find(*active_);
    active_.reset();
    if (sealed->second.live == 0) Delete(sealed);
  }
  Reservation reservation;
  if (!active_) {
    KVTIER_RETURN_IF_ERROR(StartSegment());
    reservation.new_segment = true;
  }
  Segment& segment = segments_.at(*active_);
  if (segment.size + total > kMaxOffset)
    return InvalidArgumentError("a put batch larger than a segment can address");
  reservation.file = segment.file;
  reservation.offset = segment.size;
  reservation.bytes = total;
  reservation.locations.reserve(sizes.size());
  for (uint64_t at = segment.size; const uint64_t size : sizes) {
    reservation.locations.push_back(MakeSegmentLocation(*active_, at));
    at += size;
  }
  segment.size += total;
  segment.live += total;
  file_bytes_ += total;
  live_bytes_ += total;
  if (unsynced_.empty() || unsynced_.back() != *active_) unsynced_.push_back(*active_);
  return reservation;
}

void PayloadSegments::Abandon(const Reservation& reservation) {
  const auto it = segments_.find(reservation.file->id());
  if (it == segments_.end()) return;
  Segment& segment = it->second;
  segment.live -= reservation.bytes;
  live_bytes_ -= reservation.bytes;
  if (segment.size ==
      reservation.offset + reservation.bytes) {  // nothing reserved after it: reuse the room
    segment.size = reservation.offset;
    file_bytes_ -= reservation.bytes;
  }
  if (segment.live == 0 && active_ != it->first) Delete(it);
}

Status SegmentFile::WriteAt(uint64_t offset,
                            std::span<const std::span<const uint8_t>> payloads) const {
  std::vector<iovec> iov;
  iov.reserve(payloads.size());
  for (const auto& payload : payloads) {
    if (!payload.empty()) iov.push_back({const_cast<uint8_t*>(payload.data()), payload.size()});
  }
  // One gathered write (in IOV_MAX pieces), resumed after short writes.
  for (size_t first = 0; first < iov.size();) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    const ssize_t wrote = pwritev(fd_, iov.data() + first, count, static_cast<off_t>(offset));
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return IoError("writing " + path_, errno);
    }
    offset += static_cast<uint64_t>(wrote);
    first = ConsumeIovecs(iov, first, static_cast<size_t>(wrote));
  }
  return Status::Ok();
}

Status SegmentFile::Sync() const {
  if (fdatasync(fd_) != 0) return IoError("syncing " + path_, errno);
  return Status::Ok();
}

Status SegmentFile::SyncDirectory() const {
  return SyncDir(std::filesystem::path(path_).parent_path().string());
}

Status PayloadSegments::Sync() {
  for (const uint32_t id : unsynced_) {
    const auto it = segments_.find(id);
    if (it == segments_.end()) continue;  // deleted since: nothing of it is referenced
    KVTIER_RETURN_IF_ERROR(it->second.file->Sync());
  }
  unsynced_.clear();
  if (dir_unsynced_) {
    KVTIER_RETURN_IF_ERROR(SyncDir(options_.dir));
    dir_unsynced_ = false;
  }
  return Status::Ok();
}

void PayloadSegments::Release(uint64_t location, uint64_t bytes) {
  const auto it = segments_.find(SegmentOf(location));
  if (it == segments_.end()) return;
  const uint64_t released = std::min(bytes, it->second.live);
  it->second.live -= released;
  live_bytes_ -= released;
  if (it->second.live == 0 && active_ != it->first) Delete(it);
}

std::shared_ptr<const SegmentFile> PayloadSegments::File(uint32_t segment) const {
  const auto it = segments_.find(segment);
  return it == segments_.end() ? nullptr : it->second.file;
}

std::optional<uint32_t> PayloadSegments::SparsestSealed(double max_live_share) const {
  std::optional<uint32_t> best;
  double best_share = max_live_share;
  for (const auto& [id, segment] : segments_) {
    if (id == active_ || segment.size == 0) continue;
    const double share = static_cast<double>(segment.live) / static_cast<double>(segment.size);
    if (share < best_share) {
      best_share = share;
      best = id;
    }
  }
  return best;
}

void PayloadSegments::Delete(std::map<uint32_t, Segment>::iterator it) {
  // Readers holding the file keep reading it; the name goes now, the space with them.
  unlink(it->second.file->path().c_str());
  file_bytes_ -= it->second.size;
  live_bytes_ -= it->second.live;
  if (active_ == it->first) active_.reset();
  segments_.erase(it);
}

}  // namespace kvtier::storage
