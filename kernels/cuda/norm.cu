// Normalization kernels. Row norms (layer norm, group norm: statistics per row of [rows, len])
// use a warp per row up to 1024 elements and a block per row beyond. Batch norm reduces each
// channel over [N, S] in blocks that split the channel, with fp64 partial sums, so a few wide
// channels still fill the GPU. Statistics and per-channel parameters are in the stat type S
// (fp32, fp64 for fp64 data); the normalization runs in the compute type and rounds once.
#include <algorithm>

#include "kernels/cuda/norm.h"
#include "common.cuh"

namespace mixtrain::kernels {

namespace {

template <class T> using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class S>
__device__ __forceinline__ S param(const S* p, int64_t i, S fallback) { return p ? p[i] : fallback; }

__device__ __forceinline__ int64_t row_channel(const RowNormShape& sh, int64_t r, int64_t j) {
  return (r % sh.groups) * (sh.len / sh.s) + j / sh.s;
}

template <int Group, class T>
__global__ void row_norm_forward_kernel(const T* __restrict__ x, RowNormShape sh, double eps,
                                        const stat_t<T>* weight, const stat_t<T>* bias, T* __restrict__ out,
                                        stat_t<T>* mean, stat_t<T>* rstd) {
  using S = stat_t<T>;
  using W = acc_t<T>;
  __shared__ S shared[32];
  const RowSlot<Group> slot;
  if (Group == 32 && slot.row >= sh.rows) return;
  const T* row = x + slot.row * sh.len;
  S sum = 0;
  for (int64_t j = slot.lane; j < sh.len; j += slot.width) sum += convert<S>(row[j]);
  const S mu = group_reduce<Group>(sum, SumOp{}, shared) / static_cast<S>(sh.len);
  S sq = 0;  // two passes: no cancellation when |mean| >> std
  for (int64_t j = slot.lane; j < sh.len; j += slot.width) {
    const S d = convert<S>(row[j]) - mu;
    sq += d * d;
  }
  const S rs = S(1) / m_sqrt(group_reduce<Group>(sq, SumOp{}, shared) / static_cast<S>(sh.len) + static_cast<S>(eps));
  if (slot.lane == 0) {
    mean[slot.row] = mu;
    rstd[slot.row] = rs;
  }
  const W m = static_cast<W>(mu), r = static_cast<W>(rs);
  for (int64_t j = slot.lane; j < sh.len; j += slot.width) {
    const int64_t ch = row_channel(sh, slot.row, j);
    out[slot.row * sh.len + j] =
        convert<T>((convert<W>(row[j]) - m) * r * static_cast<W>(param(weight, ch, S(1))) +
                   static_cast<W>(param(bias, ch, S(0))));
  }
}

template <int Group, class T>
__global__ void row_norm_grad_input(const T* __restrict__ x, const T* __restrict__ g, RowNormShape sh,
                                    const stat_t<T>* mean, const stat_t<T>* rstd, const stat_t<T>* weight,
                                    T* __restrict__ gx) {
  using S = stat_t<T>;
  __shared__ S shared[32];
  const RowSlot<Group> slot;
  if (Group == 32 && slot.row >= sh.rows) return;
  const int64_t base = slot.row * sh.len;
  const S mu = mean[slot.row], rs = rstd[slot.row];
  S a = 0, b = 0;
  for (int64_t j = slot.lane; j < sh.len; j += slot.width) {
    const S dxhat = convert<S>(g[base + j]) * param(weight, row_channel(sh, slot.row, j), S(1));
    a += dxhat;
    b += dxhat * (convert<S>(x[base + j]) - mu) * rs;
  }
  const S n = static_cast<S>(sh.len);
  a = group_reduce<Group>(a, SumOp{}, shared) / n;
  b = group_reduce<Group>(b, SumOp{}, shared) / n;
  for (int64_t j = slot.lane; j < sh.len; j += slot.width) {
    const S xhat = (convert<S>(x[base + j]) - mu) * rs;
    const S dxhat = convert<S>(g[base + j]) * param(weight, row_channel(sh, slot.row, j), S(1));
    gx[base + j] = convert<T>(rs * (dxhat - a - xhat * b));
  }
}

// Layer norm's affine gradients: column sums of dy * xhat and dy over row chunks of kChunkRows,
// partials [chunks, len] (two arrays), then summed per column in order.
constexpr int kChunkRows = 64;

template <class T>
__global__ void layer_norm_affine_partial(const T* __restrict__ x, const T* __restrict__ g, int64_t rows,
                                          int64_t len, const stat_t<T>* mean, const stat_t<T>* rstd,
                                          stat_t<T>* part_w, stat_t<T>* part_b) {
  using S = stat_t<T>;
  __shared__ S sw[8][33], sb[8][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x, chunk = blockIdx.y;
  const int64_t r0 = chunk * kChunkRows, r1 = min64(rows, r0 + kChunkRows);
  S aw = 0, ab = 0;
  if (col < len)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const S dy = convert<S>(g[r * len + col]);
      aw += dy * (convert<S>(x[r * len + col]) - mean[r]) * rstd[r];
      ab += dy;
    }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y != 0 || col >= len) return;
  for (int k = 1; k < 8; ++k) aw += sw[k][threadIdx.x], ab += sb[k][threadIdx.x];
  part_w[chunk * len + col] = aw;
  part_b[chunk * len + col] = ab;
}

template <class S>
__global__ void sum_chunks(const S* part, int64_t chunks, int64_t len, S* out) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (!out || col >= len) return;
  S acc = 0;
  for (int64_t c = 0; c < chunks; ++c) acc += part[c * len + col];
  out[col] = acc;
}

// Group norm's affine gradients (any layout): one block per channel.
template <class T>
__global__ void row_norm_affine_per_channel(const T* __restrict__ x, const T* __restrict__ g, RowNormShape sh,
                                            const stat_t<T>* mean, const stat_t<T>* rstd, stat_t<T>* gw,
                                            stat_t<T>* gb) {
  using S = stat_t<T>;
  __shared__ S shared[32];
  const int64_t ch = blockIdx.x, per_group = sh.len / sh.s, grp = ch / per_group, cl = ch % per_group;
  const int64_t batches = sh.rows / sh.groups;
  S aw = 0, ab = 0;
  for (int64_t e = threadIdx.x; e < batches * sh.s; e += blockDim.x) {
    const int64_t r = (e / sh.s) * sh.groups + grp, j = cl * sh.s + e % sh.s;
    const S dy = convert<S>(g[r * sh.len + j]);
    aw += dy * (convert<S>(x[r * sh.len + j]) - mean[r]) * rstd[r];
    ab += dy;
  }
  aw = block_reduce(aw, SumOp{}, shared);
  ab = block_reduce(ab, SumOp{}, shared);
  if (threadIdx.x == 0) {
    if (gw) gw[ch] = aw;
    if (gb) gb[ch] = ab;
  }
}

template <class Kernel>
void launch_rows(int64_t rows, int64_t len, cudaStream_t stream, Kernel&& k) {
  if (len <= 1024) k(std::integral_constant<int, 32>{}, dim3(static_cast<unsigned>((rows + 7) / 8)), dim3(256));
  else k(std::integral_constant<int, 0>{}, dim3(static_cast<unsigned>(rows)), dim3(512));
}

}  // namespace

void row_norm_forward(DType dtype, const void* x, const RowNormShape& sh, double eps, const void* weight,
                      const void* bias, void* out, void* mean, void* rstd, cudaStream_t stream) {
  if (sh.rows == 0) return;
  dispatch_floating(dtype, "row_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = stat_t<T>;
    launch_rows(sh.rows, sh.len, stream, [&](auto group, dim3 grid, dim3 block) {
      row_norm_forward_kernel<decltype(group)::value, T><<<grid, block, 0, stream>>>(
          static_cast<const T*>(x), sh, eps, static_cast<const S*>(weight), static_cast<const S*>(bias),
          static_cast<T*>(out), static_cast<S*>(mean), static_cast<S*>(rstd));
    });
  });
  check_launch("row_norm_forward");
}

size_t row_norm_workspace_bytes(DType dtype, const RowNormShape& sh) {
  const size_t s = dtype == DType::Float64 ? 8 : 4;
  return sh.groups == 1 && sh.s == 1 ? 2 * s * static_cast<size_t>((sh.rows + kChunkRows - 1) / kChunkRows * sh.len) : 0;
}

void row_norm_backward(DType dtype, const void* x, const void* grad_y, const RowNormShape& sh, const void* mean,
                       const void* rstd, const void* weight, void* grad_x, void* grad_weight, void* grad_bias,
                       void* workspace, cudaStream_t stream) {
  if (sh.rows == 0) return;
  dispatch_floating(dtype, "row_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using S = stat_t<T>;
    const T* px = static_cast<const T*>(x);
    const T* pg = static_cast<const T*>(grad_y);
    const S* pm = static_cast<const S*>(mean);
    const S* pr = static_cast<const S*>(rstd);
    if (grad_x) {
      launch_rows(sh.rows, sh.len, stream, [&](auto group, dim3 grid, dim3 block) {
        row_norm_grad_input<decltype(group)::value, T><<<grid, block, 0, stream>>>(
            px, pg, sh, pm, pr, static_cast<const S*>(weight), static_cast<T*>(grad_x));
      });
      check_launch("row_norm_grad_input");
    }
    if (!grad_weight && !grad_bias) return;
    if (sh.groups == 1 && sh.s == 1) {
      const int64_t chunks = (sh.rows + kChunkRows - 1) / kChunkRows;
      S* part_w = static_cast<S*>(workspace);
      S* part_b = part_w + chunks * sh.len;
      const dim3 grid(static_cast<unsigned>((sh.len + 31) / 32), static_cast<unsigned>(chunks));
      layer_norm_affine_partial<T><<<grid, dim3(32, 8), 0, stream>>>(px, pg, sh.rows, sh.len, pm, pr, part_w, part_b);
      check_launch("layer_norm_affine_partial");
      const unsigned blocks = static_cast<unsigned>((sh.len + 255) / 256);
      sum_chunks<<<blocks, 256, 0, stream>>>(part_w, chunks, sh.len, static_cast<S*>(grad_weight));
      sum_chunks<<<blocks, 256, 0, stream>>>(part_b, chunks, sh.len, static_cast<S*>(grad_bias));
    } else {
      row_norm_affine_per_channel<T><<<static_cast<unsigned>(sh.channels), 256, 0, stream>>>(
          px, pg, sh, pm, pr, static_cast<S*>(grad_weight), static_cast<S*>(grad_bias));
    }
    check_launch("row_norm_affine");
  });
}

}  // namespace mixtrain::kernels
