// Launch sizing and launch-error checks shared by every kernel file.
#include <algorithm>

#include "common.cuh"

namespace mixtrain::kernels {

int sm_count() {
  // Per process, not per device: mixtrain's devices are alike in practice, and the value only
  // sizes grids (a smaller grid is still correct).
  static const int count = [] {
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0)
      sms = 80;
    return sms;
  }();
  return count;
}

int64_t blocks_for(int64_t work, int64_t per_block) {
  const int64_t needed = std::max<int64_t>(1, (work + per_block - 1) / per_block);
  return std::min<int64_t>(needed, static_cast<int64_t>(sm_count()) * 32);
}

void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    MT_ERROR("cuda: launch of kernel '", kernel, "' failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

}  // namespace mixtrain::kernels
