#include "services/store/stream/splice_writer.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "common/iovec.h"

namespace kvtier::store {
namespace {

Status ConnectionError(const char* what) {
  return UnavailableError(std::string("data stream: ") + what + ": " + std::strerror(errno));
}

// splice() has no MSG_NOSIGNAL: into a connection the reader closed it raises SIGPIPE,
// which would end the process. The writing thread keeps SIGPIPE blocked from its first
// write on, and takes back the one such a write left pending.
void BlockSigpipeOnThisThread() {
  thread_local bool blocked = false;
  if (blocked) return;
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  blocked = true;
}

void TakePendingSigpipe() {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  const timespec now{};
  sigtimedwait(&pipe, nullptr, &now);
}

}  // namespace

Result<std::unique_ptr<SpliceWriter>> SpliceWriter::Create() {
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0)
    return UnavailableError(std::string("pipe2: ") + std::strerror(errno));
  std::unique_ptr<SpliceWriter> writer(new SpliceWriter(fds[0], fds[1]));
  const int size = fcntl(fds[1], F_SETPIPE_SZ, static_cast<int>(kPipeBytes));
  const int got = size > 0 ? size : fcntl(fds[1], F_GETPIPE_SZ);
  if (got < static_cast<int>(kMinPipeBytes)) {
    return UnavailableError("the kernel gives this process a pipe of " + std::to_string(got) +
                            " bytes; splicing needs " + std::to_string(kMinPipeBytes));
  }
  return writer;
}

SpliceWriter::~SpliceWriter() {
  close(pipe_[0]);
  close(pipe_[1]);
}

void SpliceWriter::Clear() {
  iov_.clear();
  lend_.clear();
  next_ = 0;
  lent_bytes_ = 0;
  // A reply cut off mid-write leaves bytes in the pipe: they belong to a connection that
  // is closing, and must not lead the next reply's bytes. Drop them.
  if (in_pipe_ > 0) {
    char sink[4096];
    while (read(pipe_[0], sink, sizeof(sink)) > 0) {
    }
    in_pipe_ = 0;
  }
}

void SpliceWriter::Add(const void* data, size_t size, bool lend) {
  if (size == 0) return;
  iov_.push_back({const_cast<void*>(data), size});
  lend_.push_back(lend ? 1 : 0);
}

size_t SpliceWriter::RunLength(size_t max) const {
  const bool lent = can_lend_ && lend_[next_] != 0;
  size_t end = next_ + 1;
  while (end < iov_.size() && end - next_ < max && (can_lend_ && lend_[end] != 0) == lent) ++end;
  return end - next_;
}

Result<bool> SpliceWriter::Write(int socket) {
  BlockSigpipeOnThisThread();
  for (;;) {
    if (in_pipe_ > 0) {
      KVTIER_ASSIGN_OR_RETURN(const bool drained, DrainPipe(socket));
      if (!drained) return false;
    }
    if (next_ == iov_.size()) return true;
    if (can_lend_ && lend_[next_] != 0) {
      KVTIER_RETURN_IF_ERROR(FillPipe());
      continue;
    }
    KVTIER_ASSIGN_OR_RETURN(const bool copied, Copy(socket));
    if (!copied) return false;
  }
}

// The pipe's bytes into the socket; SPLICE_F_MORE while more of the reply follows, so
// that the kernel fills whole segments across the calls.
Result<bool> SpliceWriter::DrainPipe(int socket) {
  while (in_pipe_ > 0) {
    const unsigned more = next_ < iov_.size() ? SPLICE_F_MORE : 0;
    const ssize_t n = splice(pipe_[0], nullptr, socket, nullptr, in_pipe_,
                             SPLICE_F_MOVE | SPLICE_F_NONBLOCK | more);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return false;
    if (n < 0 && errno == EPIPE) TakePendingSigpipe();
    if (n <= 0) return ConnectionError("splice into the socket");
    in_pipe_ -= static_cast<size_t>(n);
  }
  return true;
}

// References to the next lent ranges' pages into the empty pipe, as many as it holds.
Status SpliceWriter::FillPipe() {
  const size_t count = RunLength(IOV_MAX);
  for (;;) {
    const ssize_t n = vmsplice(pipe_[1], iov_.data() + next_, count, SPLICE_F_NONBLOCK);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EFAULT || errno == EINVAL || errno == ENOMEM)) {
      can_lend_ = false;  // memory the kernel will not reference: copy it, and the rest
      return Status::Ok();
    }
    if (n <= 0) return ConnectionError("vmsplice into the pipe");
    in_pipe_ = static_cast<size_t>(n);
    lent_bytes_ += in_pipe_;
    next_ = ConsumeIovecs(iov_, next_, in_pipe_);
    return Status::Ok();
  }
}

Result<bool> SpliceWriter::Copy(int socket) {
  const size_t count = RunLength(IOV_MAX);
  msghdr message{};
  message.msg_iov = iov_.data() + next_;
  message.msg_iovlen = count;
  const int more = next_ + count < iov_.size() ? MSG_MORE : 0;
  for (;;) {
    const ssize_t n = sendmsg(socket, &message, MSG_NOSIGNAL | MSG_DONTWAIT | more);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return false;
    if (n < 0) return ConnectionError("sendmsg");
    next_ = ConsumeIovecs(iov_, next_, static_cast<size_t>(n));
    return true;
  }
}

}  // namespace kvtier::store
