// topk over rows of a contiguous [rows, n] tensor, and its backward (a scatter into zeros).
//
// One block per row finds the k elements in k rounds: each round every thread takes the best of
// its strided elements that come after the previous pick in a strict total order (NaN above
// every number, then value, then index), and a block reduction keeps the best of those. That
// costs k passes over the row, which suits the small k topk is called with (top-1/5 accuracy,
// sampling); the picks come out sorted, and equal values in index order as on the CPU.
#include "kernels/cuda/reduce.h"
#include "backends/reduce_math.h"
#include "common.cuh"

namespace mixtrain::kernels {

namespace {

// An element of a row; index -1 stands for "none" and comes after everything.
template <class A>
using Pick = backends::math::ValueIndex<A>;

// Whether a comes strictly before b in the output order (backends/reduce_math.h's, with "none" last).
template <class A>
__device__ __forceinline__ bool before(const Pick<A>& a, const Pick<A>& b, bool largest) {
  if (a.index < 0) return false;
  if (b.index < 0) return true;
  return backends::math::topk_before(a.value, a.index, b.value, b.index, largest);
}

template <class T>
__global__ void topk_rows(const T* __restrict__ x, int64_t rows, int64_t n, int64_t k, bool largest, T* values,
                          int64_t* indices) {
  using A = acc_t<T>;
  __shared__ A shared_value[kThreads];
  __shared__ int64_t shared_index[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * n;
    Pick<A> previous{A(0), -1};  // none yet: every element is eligible
    for (int64_t j = 0; j < k; ++j) {
      Pick<A> best{A(0), -1};
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const Pick<A> candidate{load_acc(row + i), i};
        const bool eligible = previous.index < 0 || before(previous, candidate, largest);
        if (eligible && before(candidate, best, largest)) best = candidate;
      }
      shared_value[threadIdx.x] = best.value;
      shared_index[threadIdx.x] = best.index;
      __syncthreads();
      for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
          const Pick<A> mine{shared_value[threadIdx.x], shared_index[threadIdx.x]};
          const Pick<A> other{shared_value[threadIdx.x + stride], shared_index[threadIdx.x + stride]};
          if (before(other, mine, largest)) {
            shared_value[threadIdx.x] = other.value;
            shared_index[threadIdx.x] = other.index;
          }
        }
        __syncthreads();
      }
      previous = Pick<A>{shared_value[0], shared_index[0]};
      if (threadIdx.x == 0) {
        values[r * k + j] = row[previous.index];
        indices[r * k + j] = previous.index;
      }
      __syncthreads();  // shared[0] is read by every thread before the next round writes it
    }
  }
}

template <class T>
__global__ void topk_scatter(const T* __restrict__ grad, const int64_t* __restrict__ indices, int64_t rows, int64_t n,
                             int64_t k, T* grad_x) {
  const int64_t total = rows * k;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = t / k;
    grad_x[r * n + indices[t]] = grad[t];
  }
}

}  // namespace

void topk(DType dtype, const void* x, int64_t rows, int64_t n, int64_t k, bool largest, void* values, int64_t* indices,
          cudaStream_t stream) {
  if (rows == 0 || k == 0) return;
  MT_CHECK(dtype != DType::Bool, "topk: bool tensors are not supported on CUDA");
  dispatch_all(dtype, "topk", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      const unsigned blocks = static_cast<unsigned>(min64(rows, 65535));
      topk_rows<T><<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), rows, n, k, largest,
                                                   static_cast<T*>(values), indices);
      check_launch("topk");
    }
  });
}

void topk_backward(DType dtype, const void* grad, const int64_t* indices, int64_t rows, int64_t n, int64_t k,
                   void* grad_x, cudaStream_t stream) {
  dispatch_floating(dtype, "topk_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const size_t bytes = static_cast<size_t>(rows * n) * sizeof(T);
    MT_CHECK(bytes == 0 || cudaMemsetAsync(grad_x, 0, bytes, stream) == cudaSuccess,
             "topk_backward: cudaMemsetAsync failed");
    if (rows * k == 0) return;
    topk_scatter<T><<<static_cast<unsigned>(blocks_for(rows * k, kThreads)), kThreads, 0, stream>>>(
        static_cast<const T*>(grad), indices, rows, n, k, static_cast<T*>(grad_x));
    check_launch("topk_backward");
  });
}

}  // namespace mixtrain::kernels
