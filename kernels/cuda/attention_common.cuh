#pragma once
// Shared by the fused attention kernels (attention.cu, attention_mma.cu): launch sizes, tile
// shapes and the shared-memory opt-in.
#include <climits>

#include "kernels/cuda/attention.h"
#include "common.cuh"

namespace mixtrain::kernels::attention {

constexpr int kThreads = 256;
constexpr size_t kDefaultSmem = 48 * 1024;  // what a kernel gets without opting in

// A kernel's query and key rows per tile and its dynamic shared memory in bytes.
struct Tile {
  int bq, bk;
  size_t smem;
};

// Lets `kernel` use `bytes` of dynamic shared memory (beyond 48 KB needs an explicit opt-in),
// with a clear error when the device has less.
template <class Kernel>
void allow_smem(Kernel kernel, const char* name, size_t bytes) {
  int device = 0, most = 0;
  MT_CHECK(cudaGetDevice(&device) == cudaSuccess, name, ": cudaGetDevice failed");
  MT_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess, name,
           ": cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin) failed");
  MT_CHECK(bytes <= static_cast<size_t>(most), name, ": the head dims need ", bytes,
           " bytes of shared memory per block, the device has ", most);
  // The device's whole opt-in maximum, not `bytes`: the attribute is the kernel's limit for every
  // later launch, and one that needs more than this call's bytes (other head dims) but no opt-in
  // of its own would otherwise fail with "invalid argument".
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
  MT_CHECK(err == cudaSuccess, name, ": cudaFuncSetAttribute(MaxDynamicSharedMemorySize, ", most,
           ") failed: ", cudaGetErrorName(err));
}

// The tensor-core kernels (attention_mma.cu): false, having done nothing, where they do not apply
// (not fp16/bf16, head dims not multiples of 16 up to 128, a device before sm_80).
bool forward_mma(DType dtype, const void* q, const void* k, const void* v, const AttentionDims& d, void* out, void* lse,
                 cudaStream_t stream);
// dvec: D = rowsum(dO * O) per query, computed by the caller.
bool backward_mma(DType dtype, const void* q, const void* k, const void* v, const void* grad_out, const void* lse,
                  const void* dvec, const AttentionDims& d, void* grad_q, void* grad_k, void* grad_v,
                  cudaStream_t stream);

inline void check_grid(int64_t blocks, const char* name) {
  MT_CHECK(blocks <= INT_MAX, name, ": ", blocks, " blocks exceed the grid limit");
}

}  // namespace mixtrain::kernels::attention
