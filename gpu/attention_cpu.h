// The CPU reference of the paged attention kernels (internal to gpu/; the contracts are
// gpu/kernels.h's): plain loops in fp32, a score pass, then softmax and the weighted sum.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include "gpu/kernels.h"

namespace kvtier::gpu::internal {

[[nodiscard]] Status DecodeAttentionOnCpu(const DecodeAttentionArgs& args);
[[nodiscard]] Status ChunkedAttentionOnCpu(const ChunkedAttentionArgs& args);

}  // namespace kvtier::gpu::internal
