// XXH3-64 at the speed of the machine's vector units, for the storage files that hash
// payloads (block checksums). Internal to storage/.
//
// Debian's libxxhash builds its plain XXH3_64bits for SSE2 only: 8.9 GB/s on dev's Xeon,
// so a 256 KiB block took 29 us to hash, longer than the loopback takes to carry it. The
// same library ships runtime-dispatched entry points (xxh_x86dispatch.h: AVX2 or AVX-512
// where the CPU has them, 27-30 GB/s there; the same hashes, which block_header_test
// pins). Including this header after <xxhash.h> makes the XXH3-64 calls of the file use
// them on x86-64; elsewhere (aarch64 builds use NEON already) it changes nothing.
#pragma once

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack: no allocation per streamed hash
#include <xxhash.h>

#if defined(__x86_64__)
#include <xxh_x86dispatch.h>  // #defines XXH3_64bits and XXH3_64bits_update to the dispatched ones
#endif
