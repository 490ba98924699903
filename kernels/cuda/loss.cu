// Negative log-likelihood over log-probabilities [outer, classes, inner] with ignore_index and
// label smoothing (the mean over non-ignored targets), its backward, and the index check that
// cross_entropy and embedding run on the device.
#include "kernels/cuda/loss.h"
#include "backends/cuda/workspace.h"
#include "common.cuh"

namespace mixtrain::kernels {

namespace {

struct NllSums {
  double total;
  double count;
};

template <class T>
__global__ void nll_partial(const T* __restrict__ logp, const int64_t* __restrict__ target, int64_t outer,
                            int64_t classes, int64_t inner, backends::NllLossArgs args, NllSums* sums) {
  __shared__ double shared[32];
  double total = 0, count = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < outer * inner; k += stride) {
    const int64_t t = target[k];
    if (t == args.ignore_index) continue;
    if (t < 0 || t >= classes) continue;  // reported by check_indices, which the backend runs first
    const T* row = logp + (k / inner) * classes * inner + k % inner;
    double term = -(1.0 - args.label_smoothing) * static_cast<double>(convert<acc_t<T>>(row[t * inner]));
    if (args.label_smoothing != 0.0) {
      double all = 0;
      for (int64_t c = 0; c < classes; ++c) all += static_cast<double>(convert<acc_t<T>>(row[c * inner]));
      term -= args.label_smoothing * all / static_cast<double>(classes);
    }
    total += term;
    count += 1;
  }
  total = block_reduce(total, SumOp{}, shared);
  count = block_reduce(count, SumOp{}, shared);
  if (threadIdx.x == 0) {
    atomicAdd(&sums->total, total);
    atomicAdd(&sums->count, count);
  }
}

template <class T>
__global__ void nll_finish(const NllSums* sums, T* loss, int64_t* count) {
  const double c = sums->count;
  *loss = convert<T>(c > 0 ? sums->total / c : NAN);
  *count = static_cast<int64_t>(c);
}

template <class T>
__global__ void nll_backward_kernel(const int64_t* __restrict__ target, int64_t outer, int64_t classes, int64_t inner,
                                    backends::NllLossArgs args, const T* grad_loss, const int64_t* count,
                                    T* __restrict__ grad_logp) {
  using A = acc_t<T>;
  const int64_t valid = *count;
  const double scale = valid ? -static_cast<double>(convert<A>(*grad_loss)) / static_cast<double>(valid) : 0.0;
  const double eps = args.label_smoothing;
  const double smooth = scale * eps / static_cast<double>(classes);
  const int64_t total = outer * classes * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += stride) {
    const int64_t i = k % inner, c = (k / inner) % classes, o = k / (inner * classes);
    const int64_t t = target[o * inner + i];
    double g = 0;
    if (valid && t != args.ignore_index) {
      g = eps != 0.0 ? smooth : 0.0;
      if (c == t) g = scale * (1.0 - eps) + (eps != 0.0 ? smooth : 0.0);
    }
    grad_logp[k] = convert<T>(static_cast<A>(g));
  }
}

__global__ void check_indices_kernel(const int64_t* __restrict__ idx, int64_t n, int64_t limit, int64_t allowed,
                                     int* flag) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int bad = 0;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride) {
    const int64_t v = idx[k];
    bad |= (v != allowed) & (v < 0 || v >= limit);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1;
}

}  // namespace

void nll_loss(DType dtype, const void* logp, const int64_t* target, int64_t outer, int64_t classes, int64_t inner,
              const backends::NllLossArgs& args, void* loss, int64_t* count, void* workspace, cudaStream_t stream) {
  static_assert(sizeof(NllSums) <= backends::cuda::kNllWorkspaceBytes, "kNllWorkspaceBytes too small");
  NllSums* sums = static_cast<NllSums*>(workspace);
  MT_CHECK(cudaMemsetAsync(sums, 0, sizeof(NllSums), stream) == cudaSuccess, "nll_loss: cudaMemsetAsync failed");
  dispatch_floating(dtype, "nll_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    nll_partial<<<blocks_for(outer * inner, kThreads), kThreads, 0, stream>>>(static_cast<const T*>(logp), target, outer,
                                                                            classes, inner, args, sums);
    check_launch("nll_loss");
    nll_finish<<<1, 1, 0, stream>>>(sums, static_cast<T*>(loss), count);
  });
  check_launch("nll_loss_finish");
}

void nll_loss_backward(DType dtype, const int64_t* target, int64_t outer, int64_t classes, int64_t inner,
                       const backends::NllLossArgs& args, const void* grad_loss, const int64_t* count, void* grad_logp,
                       cudaStream_t stream) {
  const int64_t total = outer * classes * inner;
  if (total == 0) return;
  dispatch_floating(dtype, "nll_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    nll_backward_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        target, outer, classes, inner, args, static_cast<const T*>(grad_loss), count, static_cast<T*>(grad_logp));
  });
  check_launch("nll_loss_backward");
}

void check_indices(const int64_t* idx, int64_t n, int64_t limit, int64_t allowed, int* flag, cudaStream_t stream) {
  if (n == 0) return;
  check_indices_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(idx, n, limit, allowed, flag);
  check_launch("check_indices");
}

}  // namespace mixtrain::kernels
