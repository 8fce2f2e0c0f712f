// Kernels: the operations that move and read KV blocks, behind one interface with a CPU
// implementation (the reference, always built) and a CUDA implementation (built with the
// CUDA sources, used when a device answers).
//
//   UpdateLinear     KV-cache update, linear mode: cache [b, heads, s_max, h] and update
//                    [b, heads, s, h]: cache[i, :, write_indices[i] + j, :] = update[i, :, j, :]
//                    in place; fp32, fp16 or bf16 (a copy: no conversion); int32 or int64
//                    indices. write_indices[i] < 0 or + s > s_max is kOutOfRange and nothing
//                    at all is written.
//   UpdatePaged      The same through a slot mapping into pool blocks: token t of the update
//                    ([tokens][kv_heads][head_dim]) goes to slot slot_mapping[t] (block =
//                    slot / tokens_per_block) of one layer's keys or values; a slot of -1 is
//                    padding and skipped. A quantized pool (int8, int4, fp8_e4m3) gets each
//                    token's head quantized with its scale beside the block's values.
//   Gather, Scatter  Blocks of a pool to or from a contiguous staging buffer ([count][block]),
//                    one launch per batch: the offload, onboard and transfer path.
//   Quantize,        Per (token, head) scaling to int8 (scale = max|x| / 127) or fp8 e4m3
//   Dequantize       (scale = max|x| / 448), and back.
//   DecodeAttention  One query token per sequence against that sequence's paged keys and
//                    values of one layer (GQA: query head q reads KV head q / (query heads /
//                    KV heads)); softmax(q.k * scale) . v in fp32.
//   ChunkedAttention A chunk of new query tokens per sequence (chunked prefill) against that
//                    sequence's paged keys and values of one layer, the chunk's own included
//                    (written first with UpdatePaged): query token i of a chunk of c tokens
//                    in a context of n sits at position n - c + i and sees positions 0 to
//                    n - c + i (a causal mask offset by the cached prefix). GQA and
//                    arithmetic as DecodeAttention's, which is the case c = 1.
//                    Both attentions read quantized pools too (value x scale), and
//                    windowed layers (window_tokens, sink_tokens) over tables whose
//                    blocks outside every query's window are not read.
//
// Memory: every pointer in the argument structs is memory of the backend: host memory for
// the CPU backend; device memory (or pinned host memory, for staging) for the CUDA backend.
// Allocate it with DeviceBuffer. Index arrays (write indices, slot mappings, block ids,
// block tables, lengths) are backend memory too, and are validated where they live: the
// CUDA kernels check every index before any thread writes, and report through a flag.
//
// Errors: arguments are validated first; a call that fails changes nothing. Calls are
// synchronous (they return when the result is visible to the host), so a failure is
// reported by the call that caused it.
//
// Thread safety: a backend may be used from one thread at a time.
//
// REQUIRES: buffers do not overlap (except cache/output, which are the same buffer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "common/kv_layout.h"
#include "common/status.h"

namespace kvtier::gpu {

enum class IndexType : uint8_t { kInt32, kInt64 };

struct LinearUpdateArgs {
  void* cache = nullptr;                // [batch, heads, max_seq, head_size]
  const void* update = nullptr;         // [batch, heads, seq, head_size]
  const void* write_indices = nullptr;  // [batch]
  IndexType index_type = IndexType::kInt32;
  KvDtype dtype = KvDtype::kFp16;  // fp32, fp16 or bf16
  uint32_t batch = 0, heads = 0, max_seq = 0, seq = 0, head_size = 0;
};

// One layer's keys or values of `tokens` tokens into pool blocks of `layout`.
struct PagedUpdateArgs {
  void* pool = nullptr;  // pool_blocks blocks of layout->bytes_per_block()
  size_t pool_blocks = 0;
  const KvLayout* layout = nullptr;
  uint32_t layer = 0;
  KvPart part = KvPart::kKey;
  const void* update = nullptr;           // [tokens][num_kv_heads][head_dim]
  const int64_t* slot_mapping = nullptr;  // [tokens]; -1 skips the token
  uint32_t tokens = 0;
  // The update's dtype for a quantized layout (fp32, fp16 or bf16: each token's head is
  // scaled and rounded as common/kv_layout.h says); other layouts take their own dtype.
  KvDtype update_dtype = KvDtype::kFp16;
};

// Whole blocks between a pool and staging[i * block_bytes ...] for i < count.
struct BlockCopyArgs {
  void* pool = nullptr;
  size_t pool_blocks = 0;
  size_t block_bytes = 0;               // a multiple of 16
  const uint32_t* block_ids = nullptr;  // [count], each < pool_blocks, no repeats for Scatter
  uint32_t count = 0;
  void* staging = nullptr;  // count * block_bytes
};

// Per (token, head) quantization of [tokens][heads][head_dim] values.
struct QuantizeArgs {
  const void* input = nullptr;
  KvDtype input_dtype = KvDtype::kFp16;   // fp32, fp16 or bf16
  void* output = nullptr;                 // same shape
  KvDtype output_dtype = KvDtype::kInt8;  // int8 or fp8 e4m3
  float* scales = nullptr;                // [tokens][heads]
  uint32_t tokens = 0, heads = 0, head_dim = 0;
};

struct DequantizeArgs {
  const void* input = nullptr;
  KvDtype input_dtype = KvDtype::kInt8;  // int8 or fp8 e4m3
  const float* scales = nullptr;         // [tokens][heads]
  void* output = nullptr;
  KvDtype output_dtype = KvDtype::kFp32;  // fp32, fp16 or bf16
  uint32_t tokens = 0, heads = 0, head_dim = 0;
};

struct DecodeAttentionArgs {
  const void* pool = nullptr;
  size_t pool_blocks = 0;
  const KvLayout* layout = nullptr;  // any dtype
  uint32_t layer = 0;
  uint32_t batch = 0;
  uint32_t num_query_heads = 0;            // a multiple of the layout's KV heads
  const float* query = nullptr;            // [batch][num_query_heads][head_dim]
  const uint32_t* block_tables = nullptr;  // [batch][max_blocks_per_sequence]
  uint32_t max_blocks_per_sequence = 0;
  const uint32_t* context_lengths = nullptr;  // [batch], tokens, each >= 1
  float scale = 0.0f;                         // usually 1 / sqrt(head_dim)
  float* output = nullptr;                    // [batch][num_query_heads][head_dim]
  // A windowed layer (0: full attention): the query at position p sees the first
  // sink_tokens positions and those above p - window_tokens; table entries of blocks it
  // sees none of are not read (a windowed pool's kNoBlock).
  uint32_t window_tokens = 0;
  uint32_t sink_tokens = 0;
};

// Sequence b's chunk is query tokens [query_starts[b], query_starts[b + 1]), at least one;
// its context after the chunk is context_lengths[b] tokens, at least the chunk.
struct ChunkedAttentionArgs {
  const void* pool = nullptr;
  size_t pool_blocks = 0;
  const KvLayout* layout = nullptr;  // any dtype
  uint32_t layer = 0;
  uint32_t batch = 0;
  uint32_t num_query_heads = 0;            // a multiple of the layout's KV heads
  uint32_t query_tokens = 0;               // every chunk's tokens: query_starts[batch]
  const float* query = nullptr;            // [query_tokens][num_query_heads][head_dim]
  const uint32_t* query_starts = nullptr;  // [batch + 1]: 0, then increasing
  const uint32_t* block_tables = nullptr;  // [batch][max_blocks_per_sequence]
  uint32_t max_blocks_per_sequence = 0;
  const uint32_t* context_lengths = nullptr;  // [batch], tokens, the chunk's included
  float scale = 0.0f;                         // usually 1 / sqrt(head_dim)
  float* output = nullptr;                    // [query_tokens][num_query_heads][head_dim]
  // As DecodeAttentionArgs': each query token of a chunk sees its own window.
  uint32_t window_tokens = 0;
  uint32_t sink_tokens = 0;
};

enum class MemoryKind : uint8_t { kDevice, kStaging };

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  virtual std::string_view name() const = 0;

  [[nodiscard]] virtual Status UpdateLinear(const LinearUpdateArgs& args) = 0;
  [[nodiscard]] virtual Status UpdatePaged(const PagedUpdateArgs& args) = 0;
  [[nodiscard]] virtual Status Gather(const BlockCopyArgs& args) = 0;   // pool -> staging
  [[nodiscard]] virtual Status Scatter(const BlockCopyArgs& args) = 0;  // staging -> pool
  [[nodiscard]] virtual Status Quantize(const QuantizeArgs& args) = 0;
  [[nodiscard]] virtual Status Dequantize(const DequantizeArgs& args) = 0;
  [[nodiscard]] virtual Status DecodeAttention(const DecodeAttentionArgs& args) = 0;
  [[nodiscard]] virtual Status ChunkedAttention(const ChunkedAttentionArgs& args) = 0;

  // Memory of this backend. Staging memory is host memory the device can reach (pinned
  // on CUDA); device memory is where pools live.
  [[nodiscard]] virtual Result<void*> Allocate(MemoryKind kind, size_t bytes) = 0;
  virtual void Free(MemoryKind kind, void* pointer) = 0;
  // A plain copy between any two of: this backend's memory, staging memory, host memory
  // (the direction follows from the pointers, as cudaMemcpyDefault does).
  [[nodiscard]] virtual Status Copy(void* dst, const void* src, size_t bytes) = 0;
  // `height` runs of `width` bytes, run i from src + i * src_pitch to dst + i * dst_pitch,
  // in one call (the leading tokens of every head run of a block, for partial reuse).
  // kInvalidArgument when a pitch is smaller than the width. REQUIRES: no overlap.
  [[nodiscard]] virtual Status Copy2D(void* dst, size_t dst_pitch, const void* src,
                                      size_t src_pitch, size_t width, size_t height) = 0;
};

// The CPU reference. Always available.
[[nodiscard]] std::unique_ptr<KernelBackend> MakeCpuBackend();

// The CUDA kernels on `device_index`. kUnavailable when the build has no CUDA sources or
// the device does not answer.
[[nodiscard]] Result<std::unique_ptr<KernelBackend>> MakeCudaBackend(int device_index);

// Memory of a backend, freed with it. Move-only.
class DeviceBuffer {
 public:
  [[nodiscard]] static Result<DeviceBuffer> Create(KernelBackend& backend, MemoryKind kind,
                                                   size_t bytes);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }

 private:
  void Reset();
  KernelBackend* backend_ = nullptr;
  MemoryKind kind_ = MemoryKind::kDevice;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvtier::gpu
