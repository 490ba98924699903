// Softmax and log-softmax over the middle axis of [outer, n, inner], forward and backward, in
// fp32 for half inputs (fp64 for fp64). Rows (inner == 1) use a warp per row up to 1024 entries
// and a block per row beyond; columns (inner > 1) use a thread per column, reads coalesced.
#include <cfloat>

#include "kernels/cuda/softmax.h"
#include "backends/softmax_math.h"
#include "common.cuh"

namespace mixtrain::kernels {

namespace {


// causal_rows > 0: row r keeps entries j <= r % causal_rows (backends::softmax), the rest are 0.
template <int Group, class T, bool Log>
__global__ void softmax_rows(const T* __restrict__ x, T* __restrict__ out, int64_t rows, int64_t n,
                             int64_t causal_rows) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const RowSlot<Group> slot;
  if (Group == 32 && slot.row >= rows) return;  // whole warps leave together
  const T* xr = x + slot.row * n;
  T* yr = out + slot.row * n;
  const int64_t diag = causal_rows > 0 ? slot.row % causal_rows + 1 : n;
  const int64_t kept = diag < n ? diag : n;
  A mx = -INFINITY;
  for (int64_t j = slot.lane; j < kept; j += slot.width) mx = max(mx, convert<A>(xr[j]));
  mx = group_reduce<Group>(mx, MaxOp{}, shared);
  mx = backends::math::softmax_shift(mx);
  A total = 0;
  for (int64_t j = slot.lane; j < kept; j += slot.width) total += m_exp(convert<A>(xr[j]) - mx);
  total = group_reduce<Group>(total, SumOp{}, shared);
  if (Log) {
    const A lse = backends::math::log_softmax_lse(mx, total);
    for (int64_t j = slot.lane; j < n; j += slot.width) yr[j] = convert<T>(convert<A>(xr[j]) - lse);
  } else {
    const A inv = A(1) / total;
    for (int64_t j = slot.lane; j < n; j += slot.width)
      yr[j] = j < kept ? convert<T>(backends::math::softmax_value(convert<A>(xr[j]), mx, inv)) : convert<T>(A(0));
  }
}

template <int Group, class T, bool Log>
__global__ void softmax_backward_rows(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ gx,
                                      int64_t rows, int64_t n) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const RowSlot<Group> slot;
  if (Group == 32 && slot.row >= rows) return;
  const int64_t base = slot.row * n;
  A dot = 0;
  for (int64_t j = slot.lane; j < n; j += slot.width)
    dot += backends::math::softmax_backward_term(Log, convert<A>(y[base + j]), convert<A>(g[base + j]));
  dot = group_reduce<Group>(dot, SumOp{}, shared);
  for (int64_t j = slot.lane; j < n; j += slot.width) {
    const A yv = convert<A>(y[base + j]), gv = convert<A>(g[base + j]);
    gx[base + j] = convert<T>(backends::math::softmax_backward_value(Log, yv, gv, dot));
  }
}

template <class T, bool Log>
__global__ void softmax_cols(const T* __restrict__ x, T* __restrict__ out, int64_t outer, int64_t n, int64_t inner) {
  using A = acc_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < outer * inner; r += stride) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    A mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) mx = max(mx, convert<A>(x[base + j * inner]));
    mx = backends::math::softmax_shift(mx);
    A total = 0;
    for (int64_t j = 0; j < n; ++j) total += m_exp(convert<A>(x[base + j * inner]) - mx);
    const A lse = backends::math::log_softmax_lse(mx, total), inv = A(1) / total;
    for (int64_t j = 0; j < n; ++j) {
      const A v = convert<A>(x[base + j * inner]);
      out[base + j * inner] = convert<T>(Log ? v - lse : backends::math::softmax_value(v, mx, inv));
    }
  }
}

template <class T, bool Log>
__global__ void softmax_backward_cols(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ gx,
                                      int64_t outer, int64_t n, int64_t inner) {
  using A = acc_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < outer * inner; r += stride) {
    const int64_t base = (r / inner) * n * inner + r % inner;
    A dot = 0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      dot += backends::math::softmax_backward_term(Log, convert<A>(y[k]), convert<A>(g[k]));
    }
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      const A yv = convert<A>(y[k]), gv = convert<A>(g[k]);
      gx[k] = convert<T>(backends::math::softmax_backward_value(Log, yv, gv, dot));
    }
  }
}

constexpr int64_t kWarpRowLimit = 1024;

template <class Launch>
void by_log(bool log, Launch&& launch) {
  if (log) launch(std::true_type{});
  else launch(std::false_type{});
}

}  // namespace

void softmax(DType dtype, const void* xv, void* outv, int64_t outer, int64_t n, int64_t inner, bool log,
             int64_t causal_rows, cudaStream_t stream) {
  if (outer * n * inner == 0) return;
  dispatch_floating(dtype, log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(xv);
    T* out = static_cast<T*>(outv);
    by_log(log, [&](auto l) {
      constexpr bool L = decltype(l)::value;
      if (inner > 1) {
        softmax_cols<T, L><<<blocks_for(outer * inner, kThreads), kThreads, 0, stream>>>(x, out, outer, n, inner);
      } else if (n <= kWarpRowLimit) {
        softmax_rows<32, T, L><<<(outer + 7) / 8, 256, 0, stream>>>(x, out, outer, n, causal_rows);
      } else {
        softmax_rows<0, T, L><<<outer, 512, 0, stream>>>(x, out, outer, n, causal_rows);
      }
    });
  });
  check_launch(log ? "log_softmax" : "softmax");
}

void softmax_backward(DType dtype, const void* yv, const void* gv, void* gxv, int64_t outer, int64_t n, int64_t inner,
                      bool log, cudaStream_t stream) {
  if (outer * n * inner == 0) return;
  dispatch_floating(dtype, "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* y = static_cast<const T*>(yv);
    const T* g = static_cast<const T*>(gv);
    T* gx = static_cast<T*>(gxv);
    by_log(log, [&](auto l) {
      constexpr bool L = decltype(l)::value;
      if (inner > 1) {
        softmax_backward_cols<T, L><<<blocks_for(outer * inner, kThreads), kThreads, 0, stream>>>(y, g, gx, outer, n,
                                                                                                  inner);
      } else if (n <= kWarpRowLimit) {
        softmax_backward_rows<32, T, L><<<(outer + 7) / 8, 256, 0, stream>>>(y, g, gx, outer, n);
      } else {
        softmax_backward_rows<0, T, L><<<outer, 512, 0, stream>>>(y, g, gx, outer, n);
      }
    });
  });
  check_launch("softmax_backward");
}

}  // namespace mixtrain::kernels
