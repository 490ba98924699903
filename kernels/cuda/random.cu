// The counter-based random fill and dropout: each element's draw depends on (seed, offset + i)
// only, so the values equal the CPU backend's (backends/cpu/random.cpp).
#include "kernels/cuda/random.h"
#include "elementwise_loops.cuh"
#include "mixtrain/base/rng.h"

namespace mixtrain::kernels {

namespace {

template <class T>
__global__ void random_kernel(T* out, int64_t n, backends::RandomKind kind, uint64_t seed, uint64_t offset) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint64_t k = static_cast<uint64_t>(i);
    const double v = kind == backends::RandomKind::Uniform ? random_uniform(seed, offset + k)
                                                           : random_normal(seed, offset + 2 * k);
    out[i] = convert<T>(v);
  }
}

template <class T>
__global__ void dropout_kernel(const T* __restrict__ x, T* __restrict__ out, int64_t n, float threshold,
                               acc_t<T> scale, uint64_t seed, uint64_t offset) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const bool keep = dropout_keep(seed, offset + static_cast<uint64_t>(i), threshold);
    out[i] = convert<T>(convert<acc_t<T>>(x[i]) * (keep ? scale : acc_t<T>(0)));  // x * 0: NaN stays NaN
  }
}

}  // namespace

void random(DType dtype, void* out, int64_t n, backends::RandomKind kind, uint64_t seed, uint64_t offset,
            cudaStream_t stream) {
  if (n == 0) return;
  dispatch_floating(dtype, "random", [&](auto tag) {
    using T = typename decltype(tag)::type;
    random_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(out), n, kind, seed, offset);
  });
  check_launch("random");
}

void dropout(DType dtype, const void* x, void* out, int64_t n, double p, uint64_t seed, uint64_t offset,
             cudaStream_t stream) {
  if (n == 0) return;
  dispatch_floating(dtype, "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const acc_t<T> scale = static_cast<acc_t<T>>(host_value<T>(1.0 / (1.0 - p)));  // rounded to T first
    dropout_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(out), n, static_cast<float>(p), scale, seed, offset);
  });
  check_launch("dropout");
}

}  // namespace mixtrain::kernels
