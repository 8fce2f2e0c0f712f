// MakeCudaBackend in a build without the CUDA sources.
#include "gpu/kernels.h"

namespace kvtier::gpu {

Result<std::unique_ptr<KernelBackend>> MakeCudaBackend(int device_index) {
  return UnavailableError(
      "GPU " + std::to_string(device_index) +
      ": this build has no CUDA sources (KVTIER_CUDA=OFF, or nvcc was not found at build time)");
}

}  // namespace kvtier::gpu
