// The CPU reference backend: the contract of every kernel in plain C++. It is the
// implementation on machines without a GPU and the oracle the CUDA kernels are tested
// against. Copies move whole contiguous runs with memcpy; arithmetic is fp32.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpu/attention_cpu.h"
#include "gpu/kernel_checks.h"
#include "gpu/kernels.h"
#include "gpu/numeric.h"

namespace kvtier::gpu {
namespace {

int64_t LoadIndex(const void* indices, IndexType type, size_t i) {
  return type == IndexType::kInt32 ? static_cast<const int32_t*>(indices)[i]
                                   : static_cast<const int64_t*>(indices)[i];
}

class CpuBackend final : public KernelBackend {
 public:
  std::string_view name() const override { return "cpu"; }

  Status UpdateLinear(const LinearUpdateArgs& a) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckLinearUpdate(a));
    for (uint32_t i = 0; i < a.batch; ++i) {
      const int64_t w = LoadIndex(a.write_indices, a.index_type, i);
      if (w < 0 || w + a.seq > a.max_seq) return internal::BadWriteIndex(i, w, a.seq, a.max_seq);
    }
    const size_t row = size_t{a.head_size} * DtypeBytes(a.dtype);
    auto* cache = static_cast<char*>(a.cache);
    const auto* update = static_cast<const char*>(a.update);
    for (uint32_t i = 0; i < a.batch; ++i) {
      const auto w = static_cast<size_t>(LoadIndex(a.write_indices, a.index_type, i));
      for (uint32_t h = 0; h < a.heads; ++h) {
        const size_t plane = size_t{i} * a.heads + h;
        // The s rows of one (batch, head) are contiguous in both tensors: one copy.
        std::memcpy(cache + (plane * a.max_seq + w) * row, update + plane * a.seq * row,
                    a.seq * row);
      }
    }
    return Status::Ok();
  }

  Status UpdatePaged(const PagedUpdateArgs& a) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckPagedUpdate(a));
    const KvLayout& layout = *a.layout;
    const size_t pool_slots = a.pool_blocks * layout.tokens_per_block();
    for (uint32_t t = 0; t < a.tokens; ++t) {
      const int64_t slot = a.slot_mapping[t];
      if (slot < -1 || slot >= static_cast<int64_t>(pool_slots))
        return internal::BadSlot(t, slot, pool_slots);
    }
    const size_t head_bytes = layout.bytes_per_head_row();
    auto* pool = static_cast<char*>(a.pool);
    const auto* update = static_cast<const char*>(a.update);
    for (uint32_t t = 0; t < a.tokens; ++t) {
      if (a.slot_mapping[t] < 0) continue;
      const auto slot = static_cast<size_t>(a.slot_mapping[t]);
      char* block = pool + slot / layout.tokens_per_block() * layout.bytes_per_block();
      const auto token = static_cast<uint32_t>(slot % layout.tokens_per_block());
      for (uint32_t h = 0; h < layout.num_kv_heads(); ++h) {
        const size_t row = size_t{t} * layout.num_kv_heads() + h;
        if (layout.quantized()) {
          QuantizeRow(layout, a.update, a.update_dtype, row * layout.head_dim(), block,
                      a.layer, a.part, h, token);
        } else {
          std::memcpy(block + layout.ByteOffset(a.layer, a.part, h, token),
                      update + row * head_bytes, head_bytes);
        }
      }
    }
    return Status::Ok();
  }

  // The head_dim values of `input` from `first` on, scaled into (layer, part, head,
  // token) of a quantized block, their scale beside the values.
  static void QuantizeRow(const KvLayout& layout, const void* input, KvDtype input_dtype,
                          size_t first, char* block, uint32_t layer, KvPart part, uint32_t head,
                          uint32_t token) {
    const float scale = QuantizeRun(input, input_dtype, first, layout.head_dim(),
                                    block + layout.ByteOffset(layer, part, head, token),
                                    layout.dtype(), 0);
    std::memcpy(block + layout.ScaleOffset(layer, part, head, token), &scale, sizeof(scale));
  }

  Status Gather(const BlockCopyArgs& a) override { return CopyBlocks(a, /*to_staging=*/true); }
  Status Scatter(const BlockCopyArgs& a) override { return CopyBlocks(a, /*to_staging=*/false); }

  Status Quantize(const QuantizeArgs& a) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckQuantize(a));
    for (size_t row = 0; row < size_t{a.tokens} * a.heads; ++row) {
      a.scales[row] = QuantizeRun(a.input, a.input_dtype, row * a.head_dim, a.head_dim, a.output,
                                  a.output_dtype, row * a.head_dim);
    }
    return Status::Ok();
  }

  Status Dequantize(const DequantizeArgs& a) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckDequantize(a));
    for (size_t row = 0; row < size_t{a.tokens} * a.heads; ++row) {
      for (uint32_t d = 0; d < a.head_dim; ++d) {
        const size_t i = row * a.head_dim + d;
        const float q = LoadQuantized(a.input, a.input_dtype, i);
        StoreFloat(a.output, a.output_dtype, i, q * a.scales[row]);
      }
    }
    return Status::Ok();
  }

  Status DecodeAttention(const DecodeAttentionArgs& a) override {
    return internal::DecodeAttentionOnCpu(a);
  }
  Status ChunkedAttention(const ChunkedAttentionArgs& a) override {
    return internal::ChunkedAttentionOnCpu(a);
  }

  Result<void*> Allocate(MemoryKind, size_t bytes) override {
    // Page-aligned, like pinned memory; rounded up as aligned_alloc requires.
    constexpr size_t kAlign = 4096;
    void* p = std::aligned_alloc(kAlign,
                                 std::max<size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign));
    if (p == nullptr)
      return ResourceExhaustedError("cannot allocate " + std::to_string(bytes) +
                                    " bytes of host memory");
    return p;
  }
  void Free(MemoryKind, void* pointer) override { std::free(pointer); }
  Status Copy(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }

  Status Copy2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                size_t height) override {
    KVTIER_RETURN_IF_ERROR(internal::CheckCopy2D(dst, dst_pitch, src, src_pitch, width, height));
    for (size_t row = 0; row < height; ++row) {
      std::memcpy(static_cast<char*>(dst) + row * dst_pitch,
                  static_cast<const char*>(src) + row * src_pitch, width);
    }
    return Status::Ok();
  }

 private:
  Status CopyBlocks(const BlockCopyArgs& a, bool to_staging) {
    KVTIER_RETURN_IF_ERROR(internal::CheckBlockCopy(a));
    for (uint32_t i = 0; i < a.count; ++i) {
      if (a.block_ids[i] >= a.pool_blocks)
        return internal::BadBlockId(i, a.block_ids[i], a.pool_blocks);
    }
    if (!to_staging) KVTIER_RETURN_IF_ERROR(CheckNoRepeats(a));
    auto* pool = static_cast<char*>(a.pool);
    auto* staging = static_cast<char*>(a.staging);
    for (uint32_t i = 0; i < a.count; ++i) {
      char* block = pool + size_t{a.block_ids[i]} * a.block_bytes;
      char* staged = staging + size_t{i} * a.block_bytes;
      if (to_staging)
        std::memcpy(staged, block, a.block_bytes);
      else
        std::memcpy(block, staged, a.block_bytes);
    }
    return Status::Ok();
  }

  Status CheckNoRepeats(const BlockCopyArgs& a) {
    seen_.assign(a.pool_blocks <= (size_t{1} << 24) ? a.pool_blocks : 0, 0);
    if (seen_.empty()) return Status::Ok();  // a pool too large to mark cheaply: not checked
    for (uint32_t i = 0; i < a.count; ++i) {
      if (seen_[a.block_ids[i]]++) return internal::RepeatedBlockId(i, a.block_ids[i]);
    }
    return Status::Ok();
  }

  std::vector<uint8_t> seen_;
};

}  // namespace

std::unique_ptr<KernelBackend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

Result<DeviceBuffer> DeviceBuffer::Create(KernelBackend& backend, MemoryKind kind, size_t bytes) {
  KVTIER_ASSIGN_OR_RETURN(void* data, backend.Allocate(kind, bytes));
  DeviceBuffer buffer;
  buffer.backend_ = &backend;
  buffer.kind_ = kind;
  buffer.data_ = data;
  buffer.size_ = bytes;
  return buffer;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    backend_ = other.backend_;
    kind_ = other.kind_;
    data_ = other.data_;
    size_ = other.size_;
    other.backend_ = nullptr;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (backend_ != nullptr && data_ != nullptr) backend_->Free(kind_, data_);
  data_ = nullptr;
  backend_ = nullptr;
  size_ = 0;
}

}  // namespace kvtier::gpu
