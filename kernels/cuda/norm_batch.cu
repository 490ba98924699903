// Batch norm over x [n, c, s]: per-channel statistics from fp64 partial sums over blocks that
// split each channel (grid (c, splits)), the per-element normalization, and the backward. With
// s == 1 ([rows, c]: channels-last images, or [N, C] inputs) a channel's values are c apart, so
// the partials come from blocks that tile 32 channels by a chunk of rows instead (row_partials),
// reading rows coalesced.
#include <algorithm>

#include "kernels/cuda/norm.h"
#include "common.cuh"

namespace mixtrain::kernels {

namespace {

template <class T> using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

struct Split {
  int64_t splits, chunk;  // elements of one channel ([n * s]) per block
};

constexpr int64_t kRowTile = 32;  // channels per row_partials block: one warp's lanes

Split split_for(int64_t n, int64_t c, int64_t s) {
  const int64_t per_channel = n * s;
  int64_t splits;
  if (s == 1) {  // row_partials: blocks of kRowTile channels; keep ~4 blocks per SM busy
    const int64_t tiles = (c + kRowTile - 1) / kRowTile;
    splits = std::max<int64_t>(1, 4 * sm_count() / std::max<int64_t>(tiles, 1));
    splits = std::min<int64_t>({splits, std::max<int64_t>(1, per_channel / 64), 1024});
  } else {
    splits = std::max<int64_t>(1, 4 * sm_count() / std::max<int64_t>(c, 1));
    splits = std::min<int64_t>({splits, std::max<int64_t>(1, per_channel / 4096), 256});
  }
  const int64_t chunk = (per_channel + splits - 1) / splits;
  return {std::max<int64_t>(1, (per_channel + chunk - 1) / std::max<int64_t>(chunk, 1)), std::max<int64_t>(chunk, 1)};
}

// Element e of channel ch (e in [0, n * s)) in the [n, c, s] layout.
template <class D>
__device__ __forceinline__ int64_t at(int64_t e, int64_t ch, int64_t c, int64_t s, const D& div_s) {
  const int64_t q = div_s(e);
  return (q * c + ch) * s + (e - q * s);
}

// The channel of flat element i of [n, c, s].
template <class D>
__device__ __forceinline__ int64_t channel_of(int64_t i, int64_t c, const D& div_s, const D& div_c) {
  const int64_t q = div_s(i);
  return q - div_c(q) * c;
}

// partial[ch * splits + k] = (sum a, sum b) over chunk k of channel ch, where (a, b) is
// (x, x^2) for the statistics or (dy, dy * xhat) for the backward.
template <class T, bool Backward, class D>
__global__ void channel_partials(const T* __restrict__ x, const T* __restrict__ g, int64_t n, int64_t c, int64_t s,
                                 int64_t chunk, const stat_t<T>* mean, const stat_t<T>* invstd, double2* partial,
                                 D div_s) {
  __shared__ double shared[32];
  const int64_t ch = blockIdx.x, k = blockIdx.y;
  const int64_t begin = k * chunk, end = min64(n * s, begin + chunk);
  double a = 0, b = 0;
  const double mu = Backward ? static_cast<double>(mean[ch]) : 0.0;
  const double is = Backward ? static_cast<double>(invstd[ch]) : 0.0;
  for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) {
    const int64_t i = at(e, ch, c, s, div_s);
    const double xv = static_cast<double>(convert<acc_t<T>>(x[i]));
    if (Backward) {
      const double dy = static_cast<double>(convert<acc_t<T>>(g[i]));
      a += dy;
      b += dy * (xv - mu) * is;
    } else {
      a += xv;
      b += xv * xv;
    }
  }
  a = block_reduce(a, SumOp{}, shared);
  b = block_reduce(b, SumOp{}, shared);
  if (threadIdx.x == 0) partial[ch * gridDim.y + k] = make_double2(a, b);
}

// channel_partials for [rows, c] (s == 1): lane = channel, so a warp reads kRowTile adjacent
// channels of one row; the block's 8 warps take rows in turn and combine in shared memory.
template <class T, bool Backward>
__global__ void row_partials(const T* __restrict__ x, const T* __restrict__ g, int64_t rows, int64_t c, int64_t chunk,
                             const stat_t<T>* mean, const stat_t<T>* invstd, double2* partial) {
  constexpr int kWarps = 8;  // blockDim.x == 256
  __shared__ double sa[kWarps][kRowTile + 1], sb[kWarps][kRowTile + 1];
  const int lane = static_cast<int>(threadIdx.x % kRowTile), warp = static_cast<int>(threadIdx.x / kRowTile);
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * kRowTile + lane, k = blockIdx.y;
  const int64_t begin = k * chunk, end = min64(rows, begin + chunk);
  double a = 0, b = 0;
  if (ch < c) {
    const double mu = Backward ? static_cast<double>(mean[ch]) : 0.0;
    const double is = Backward ? static_cast<double>(invstd[ch]) : 0.0;
    for (int64_t r = begin + warp; r < end; r += kWarps) {
      const double xv = static_cast<double>(convert<acc_t<T>>(x[r * c + ch]));
      if (Backward) {
        const double dy = static_cast<double>(convert<acc_t<T>>(g[r * c + ch]));
        a += dy;
        b += dy * (xv - mu) * is;
      } else {
        a += xv;
        b += xv * xv;
      }
    }
  }
  sa[warp][lane] = a;
  sb[warp][lane] = b;
  __syncthreads();
  if (warp != 0 || ch >= c) return;
  for (int w = 1; w < kWarps; ++w) a += sa[w][lane], b += sb[w][lane];
  partial[ch * gridDim.y + k] = make_double2(a, b);
}

// Launches the partial sums of one pass (statistics, or the backward's two sums).
template <class T, bool Backward>
void launch_partials(const T* x, const T* g, int64_t n, int64_t c, int64_t s, const Split& sp, const stat_t<T>* mean,
                     const stat_t<T>* invstd, double2* partial, cudaStream_t stream) {
  if (s == 1) {
    const dim3 grid(static_cast<unsigned>((c + kRowTile - 1) / kRowTile), static_cast<unsigned>(sp.splits));
    row_partials<T, Backward><<<grid, 256, 0, stream>>>(x, g, n, c, sp.chunk, mean, invstd, partial);
    return;
  }
  with_divider(n * c * s, [&](auto dt) {
    using D = typename decltype(dt)::type;
    channel_partials<T, Backward, D><<<dim3(static_cast<unsigned>(c), static_cast<unsigned>(sp.splits)), 512, 0,
                                        stream>>>(x, g, n, c, s, sp.chunk, mean, invstd, partial,
                                                  D(s > 0 ? s : 1));  // s == 0: no element, zero sums
  });
}

template <class S>
__global__ void stats_finish(const double2* partial, int64_t splits, int64_t c, double count, double eps, S* mean,
                             S* invstd, S* running_mean, S* running_var, double momentum) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  double sum = 0, sq = 0;
  for (int64_t k = 0; k < splits; ++k) sum += partial[ch * splits + k].x, sq += partial[ch * splits + k].y;
  const double mu = sum / count;
  const double var = fmax(sq / count - mu * mu, 0.0);
  mean[ch] = static_cast<S>(mu);
  invstd[ch] = static_cast<S>(1.0 / sqrt(var + eps));
  // The running variance is unbiased, as PyTorch keeps it.
  if (running_mean) running_mean[ch] = static_cast<S>((1.0 - momentum) * running_mean[ch] + momentum * mu);
  if (running_var)
    running_var[ch] = static_cast<S>((1.0 - momentum) * running_var[ch] + momentum * var * count / fmax(1.0, count - 1.0));
}

__global__ void sums_finish(const double2* partial, int64_t splits, int64_t c, double2* sums) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  double a = 0, b = 0;
  for (int64_t k = 0; k < splits; ++k) a += partial[ch * splits + k].x, b += partial[ch * splits + k].y;
  sums[ch] = make_double2(a, b);
}

template <class T, class D>
__global__ void apply_kernel(const T* __restrict__ x, int64_t total, int64_t c, D div_s, D div_c,
                             const stat_t<T>* mean, const stat_t<T>* invstd, const stat_t<T>* weight,
                             const stat_t<T>* bias, T* __restrict__ out) {
  using W = acc_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t ch = channel_of(i, c, div_s, div_c);
    const W w = weight ? static_cast<W>(weight[ch]) : W(1), b = bias ? static_cast<W>(bias[ch]) : W(0);
    out[i] = convert<T>((convert<W>(x[i]) - static_cast<W>(mean[ch])) * static_cast<W>(invstd[ch]) * w + b);
  }
}

template <class T, class D>
__global__ void grad_input_kernel(const T* __restrict__ x, const T* __restrict__ g, int64_t total, int64_t c,
                                  D div_s, D div_c, double inv_count, const stat_t<T>* mean, const stat_t<T>* invstd,
                                  const stat_t<T>* weight, bool batch_stats, const double2* sums, T* __restrict__ gx) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t ch = channel_of(i, c, div_s, div_c);
    const double is = static_cast<double>(invstd[ch]);
    const double k_scale = (weight ? static_cast<double>(weight[ch]) : 1.0) * is;
    const double dy = static_cast<double>(convert<acc_t<T>>(g[i]));
    double dx = dy;
    if (batch_stats) {
      const double xhat = (static_cast<double>(convert<acc_t<T>>(x[i])) - static_cast<double>(mean[ch])) * is;
      dx = dy - sums[ch].x * inv_count - xhat * (sums[ch].y * inv_count);  // no fp64 division per element
    }
    gx[i] = convert<T>(static_cast<acc_t<T>>(k_scale * dx));
  }
}

template <class S>
__global__ void store_sums(const double2* sums, int64_t c, S* grad_weight, S* grad_bias) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  if (grad_weight) grad_weight[ch] = static_cast<S>(sums[ch].y);
  if (grad_bias) grad_bias[ch] = static_cast<S>(sums[ch].x);
}

unsigned channel_blocks(int64_t c) { return static_cast<unsigned>((c + 255) / 256); }

}  // namespace

size_t batch_norm_workspace_bytes(DType, int64_t n, int64_t c, int64_t s) {
  return sizeof(double2) * static_cast<size_t>(c) * static_cast<size_t>(split_for(n, c, s).splits + 1);
}

void batch_norm_stats(DType dtype, const void* x, int64_t n, int64_t c, int64_t s, double eps, void* mean,
                      void* invstd, void* running_mean, void* running_var, double momentum, void* workspace,
                      cudaStream_t stream) {
  if (c == 0) return;
  const Split sp = split_for(n, c, s);
  double2* partial = static_cast<double2*>(workspace);
  dispatch_floating(dtype, "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = stat_t<T>;
    launch_partials<T, false>(static_cast<const T*>(x), nullptr, n, c, s, sp, nullptr, nullptr, partial, stream);
    check_launch("batch_norm_partials");
    stats_finish<S><<<channel_blocks(c), 256, 0, stream>>>(partial, sp.splits, c, static_cast<double>(n * s), eps,
                                                           static_cast<S*>(mean), static_cast<S*>(invstd),
                                                           static_cast<S*>(running_mean), static_cast<S*>(running_var),
                                                           momentum);
  });
  check_launch("batch_norm_stats");
}

void batch_norm_apply(DType dtype, const void* x, int64_t n, int64_t c, int64_t s, const void* mean,
                      const void* invstd, const void* weight, const void* bias, void* out, cudaStream_t stream) {
  const int64_t total = n * c * s;
  if (total == 0) return;
  dispatch_floating(dtype, "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = stat_t<T>;
    with_divider(total, [&](auto dt) {
      using D = typename decltype(dt)::type;
      apply_kernel<T, D><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
          static_cast<const T*>(x), total, c, D(s), D(c), static_cast<const S*>(mean), static_cast<const S*>(invstd),
          static_cast<const S*>(weight), static_cast<const S*>(bias), static_cast<T*>(out));
    });
  });
  check_launch("batch_norm_apply");
}

void batch_norm_backward(DType dtype, const void* x, const void* grad_y, int64_t n, int64_t c, int64_t s,
                         const void* mean, const void* invstd, const void* weight, bool batch_stats, void* grad_x,
                         void* grad_weight, void* grad_bias, void* workspace, cudaStream_t stream) {
  if (c == 0) return;
  const Split sp = split_for(n, c, s);
  double2* partial = static_cast<double2*>(workspace);
  double2* sums = partial + c * sp.splits;
  const int64_t total = n * c * s;
  dispatch_floating(dtype, "batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = stat_t<T>;
    const T* px = static_cast<const T*>(x);
    const T* pg = static_cast<const T*>(grad_y);
    const S* pm = static_cast<const S*>(mean);
    const S* pi = static_cast<const S*>(invstd);
    launch_partials<T, true>(px, pg, n, c, s, sp, pm, pi, partial, stream);
    check_launch("batch_norm_backward_partials");
    sums_finish<<<channel_blocks(c), 256, 0, stream>>>(partial, sp.splits, c, sums);
    with_divider(total, [&](auto dt) {
      using D = typename decltype(dt)::type;
      if (grad_x && total > 0)
        grad_input_kernel<T, D><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
            px, pg, total, c, D(s), D(c), 1.0 / static_cast<double>(n * s), pm, pi, static_cast<const S*>(weight),
            batch_stats, sums, static_cast<T*>(grad_x));
    });
    store_sums<S><<<channel_blocks(c), 256, 0, stream>>>(sums, c, static_cast<S*>(grad_weight),
                                                         static_cast<S*>(grad_bias));
  });
  check_launch("batch_norm_backward");
}

}  // namespace mixtrain::kernels
