// Embedding lookup (a row gather) and its backward (a row scatter-add with atomics into the
// gradient, or into an fp32 buffer rounded once for half tables). Indices are checked by the
// backend (check_indices) before either runs.
#include "kernels/cuda/embedding.h"
#include "common.cuh"

namespace mixtrain::kernels {

namespace {

template <class T>
__global__ void gather_rows(const T* __restrict__ weight, const int64_t* __restrict__ idx, int64_t k, int64_t d,
                            T* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < k * d; e += stride)
    out[e] = weight[idx[e / d] * d + e % d];
}

// Rows outside the table are skipped: the forward rejected them, and a write there would corrupt
// memory if the indices changed since.
template <class T, class B>
__global__ void scatter_rows(const T* __restrict__ grad_out, const int64_t* __restrict__ idx, int64_t k, int64_t v,
                             int64_t d, int64_t padding_idx, B* accum) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < k * d; e += stride) {
    const int64_t row = idx[e / d];
    if (row != padding_idx && row >= 0 && row < v) atomicAdd(accum + row * d + e % d, static_cast<B>(convert<acc_t<T>>(grad_out[e])));
  }
}

}  // namespace

void embedding(DType dtype, const void* weight, const int64_t* idx, int64_t k, int64_t d, void* out,
               cudaStream_t stream) {
  if (k * d == 0) return;
  dispatch_floating(dtype, "embedding", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gather_rows<T><<<blocks_for(k * d, kThreads), kThreads, 0, stream>>>(static_cast<const T*>(weight), idx, k, d,
                                                                       static_cast<T*>(out));
  });
  check_launch("embedding");
}

void embedding_backward(DType dtype, const void* grad_out, const int64_t* idx, int64_t k, int64_t v, int64_t d,
                        int64_t padding_idx, void* grad_weight, void* accum, cudaStream_t stream) {
  scatter_add(dtype, "embedding_backward", v * d, k * d > 0, grad_weight, accum, stream, [&](auto tag, auto* buf) {
    using T = typename decltype(tag)::type;
    using B = std::remove_pointer_t<decltype(buf)>;
    scatter_rows<T, B><<<blocks_for(k * d, kThreads), kThreads, 0, stream>>>(static_cast<const T*>(grad_out), idx, k, v,
                                                                           d, padding_idx, buf);
  });
}

}  // namespace mixtrain::kernels
