// KeepLargeAllocationsInTheHeap: the process-wide malloc setting of every kvtier binary
// that moves blocks through Cap'n Proto messages.
//
// Cap'n Proto allocates every message's segments with malloc, and messages that carry
// blocks are megabytes: above glibc's mmap threshold, each one would be mmapped fresh and
// unmapped after use, paying a page fault and a page clear per 4 KiB (half the CPU time of
// `kvtier bench transfer` at 2 MiB blocks went there). Keeping such buffers in the heap,
// and the heap's top unreturned up to 1 GiB, makes them reused memory instead.
//
// Thread safety: call once at the start of main, before other threads.
#pragma once

namespace kvtier {

void KeepLargeAllocationsInTheHeap();

}  // namespace kvtier
