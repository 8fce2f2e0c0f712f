// SpliceWriter: writes one reply, a list of byte ranges, to a non-blocking socket, with
// the ranges marked `lend` sent zero copy: vmsplice puts references to their pages into a
// pipe and splice moves those references into the socket, so the sending core copies
// nothing. The reader's recv then copies straight from those pages (on loopback) or the
// NIC reads them. The other ranges (the reply's head, states, headers) are copied with
// sendmsg, as a small range may share its page with memory that changes.
//
// Why: on loopback the kernel's copy from a block's pages into socket buffers was a get's
// bound (docs/benchmarks.md#cross-node-transfer); splicing leaves one copy, on
// the reader's side.
//
// The catch, and the caller's duty: a lent page may be read by the kernel after Write
// says done, until the reader has read it. Its bytes must not change meanwhile: the data
// stream keeps a lent host-tier block pinned until its reader acks the reply
// (protocol.h); without an ack it unpins it with PinnedBlock::UnpinLent, and the tier
// replaces the page's memory before it ever writes there again.
//
// Thread safety: one thread at a time (a connection's loop). Owns its pipe.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"

namespace kvtier::store {

class SpliceWriter {
 public:
  // kUnavailable when no pipe can be made, or when the kernel gives it less than
  // kMinPipeBytes (a user over its pipe quota gets two pages): splicing through it would
  // cost more system calls than the copy it saves.
  static constexpr size_t kPipeBytes = size_t{1} << 20;
  static constexpr size_t kMinPipeBytes = size_t{256} << 10;
  [[nodiscard]] static Result<std::unique_ptr<SpliceWriter>> Create();
  ~SpliceWriter();
  SpliceWriter(const SpliceWriter&) = delete;
  SpliceWriter& operator=(const SpliceWriter&) = delete;

  // The next reply: cleared, then its ranges added in order.
  void Clear();
  void Add(const void* data, size_t size, bool lend);
  // Writes as much as the socket takes now. True when every byte is in the socket; false
  // when it would block (wait until it is writable, then call again). kUnavailable when
  // the connection failed. A page the kernel will not lend (vmsplice refuses its memory)
  // is copied instead, as is every lent range after it. The calling thread's SIGPIPE is
  // blocked from its first Write on: a closed connection is then an error here, not the
  // end of the process.
  [[nodiscard]] Result<bool> Write(int socket);
  uint64_t lent_bytes() const { return lent_bytes_; }  // of the current reply, so far

 private:
  SpliceWriter(int read_end, int write_end) : pipe_{read_end, write_end} {}
  // The ranges from `next_` on of one kind (lent or copied), at most `max` of them.
  size_t RunLength(size_t max) const;
  [[nodiscard]] Result<bool> DrainPipe(int socket);
  [[nodiscard]] Status FillPipe();
  [[nodiscard]] Result<bool> Copy(int socket);

  int pipe_[2];
  std::vector<iovec> iov_;
  std::vector<uint8_t> lend_;
  size_t next_ = 0;       // first range with bytes left
  size_t in_pipe_ = 0;    // lent bytes in the pipe, not yet in the socket
  bool can_lend_ = true;  // false once vmsplice refused a range's memory
  uint64_t lent_bytes_ = 0;
};

}  // namespace kvtier::store
