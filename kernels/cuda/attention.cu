// Fused scaled-dot-product attention on CUDA (FlashAttention-2's algorithm), the generic kernels
// for every floating dtype and head dim. All arithmetic is in acc_t<T> (fp32 for half types, fp64
// for fp64); every tile lives in shared memory with rows padded by one element so that threads
// walking a column hit distinct banks.
// - Forward: a block per (batch, query tile) loops over the key tiles a causal tile can see, with
//   an online softmax (running max and sum per query) and the output accumulated unnormalised.
// - Backward: D = rowsum(dO * O) first; then a block per (batch, key tile) loops over the query
//   tiles for dK and dV, and a block per (batch, query tile) loops over the key tiles for dQ. Both
//   recompute the probabilities from q, k and the logsumexp the same way. Every output element is
//   summed by one thread in a fixed order: no atomics, the results are the same run to run.
// - Dropout (FlashAttention-2's, as cpu/attention.cpp): forward multiplies the probabilities that
//   meet V by the mask factor (0 or `kept` = 1 / (1 - p) rounded to T) after the running sum took
//   them, so the logsumexp is the undropped one; backward regenerates the factor f of each entry
//   from the seed: dV takes P f, dS = P (f dP - D), D = rowsum(dO * O) unchanged.
// fp16/bf16 with head dims that are multiples of 16 up to 128 and no dropout take the tensor-core
// kernels (attention_mma.cu) instead.
#include <cfloat>

#include "attention_common.cuh"
#include "kernels/cuda/attention.h"
#include "mixtrain/base/rng.h"

namespace mixtrain::kernels {

namespace {

using attention::Tile;

// The scaled score of query row r against key row c: sq [bq][lde] holds q already scaled.
template <class A>
__device__ __forceinline__ A score(const A* sq, const A* sk, int r, int c, int lde, int e) {
  A dot = 0;
  for (int x = 0; x < e; ++x) dot += sq[r * lde + x] * sk[c * lde + x];
  return dot;
}

// Whether query row r of the tile starting at i0 sees key row c of the tile starting at j0.
__device__ __forceinline__ bool visible(int r, int rows, int c, int cols, int64_t i0, int64_t j0, bool causal) {
  return r < rows && c < cols && !(causal && j0 + c > i0 + r);
}

// The dropout factor of probability (b, i, j): `kept` or 0, from the draw backends/attention.h
// names, with the keep test every dropout kernel shares (base/rng.h).
template <class A>
__device__ __forceinline__ A dropout_factor(const AttentionDims& d, A kept, int64_t b, int64_t i, int64_t j) {
  const uint64_t n = d.offset + static_cast<uint64_t>((b * d.l + i) * d.s + j);
  return dropout_keep(d.seed, n, static_cast<float>(d.dropout_p)) ? kept : A(0);
}

// Copies rows [0, rows) of a [*, width] global matrix into shared memory with row stride ld,
// scaled by `mul`.
template <class T, class A>
__device__ __forceinline__ void load_rows(const T* __restrict__ src, int rows, int width, A* dst, int ld, A mul) {
  for (int idx = threadIdx.x; idx < rows * width; idx += blockDim.x) {
    const int r = idx / width, x = idx % width;
    dst[r * ld + x] = convert<A>(src[static_cast<int64_t>(r) * width + x]) * mul;
  }
}

template <class A>
__device__ __forceinline__ void zero(A* p, int n) {
  for (int idx = threadIdx.x; idx < n; idx += blockDim.x) p[idx] = A(0);
}

// ---- Forward. Shared memory: sq [bq][e+1], sk [bk][e+1], sv [bk][ev], ss [bq][bk],
// so [bq][ev], running max, running sum and this tile's rescale [bq] each.
template <class A>
size_t forward_smem(const AttentionDims& d, Tile t) {
  const size_t lde = d.e + 1;
  return sizeof(A) * (t.bq * lde + t.bk * lde + t.bk * d.ev + t.bq * t.bk + t.bq * d.ev + 3 * t.bq);
}

template <class T>
__global__ void __launch_bounds__(attention::kThreads)
    attention_forward_generic(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                              AttentionDims d, Tile tile, acc_t<T> kept, T* __restrict__ out,
                              acc_t<T>* __restrict__ lse) {
  using A = acc_t<T>;
  const bool drop = d.dropout_p > 0.0;
  extern __shared__ __align__(16) unsigned char smem[];
  const int bq = tile.bq, bk = tile.bk, e = static_cast<int>(d.e), ev = static_cast<int>(d.ev), lde = e + 1;
  const int64_t tiles = (d.l + bq - 1) / bq;
  const int64_t b = blockIdx.x / tiles, i0 = blockIdx.x % tiles * bq;
  const int rows = static_cast<int>(min64(bq, d.l - i0));
  A* sq = reinterpret_cast<A*>(smem);
  A* sk = sq + bq * lde;
  A* sv = sk + bk * lde;
  A* ss = sv + bk * ev;
  A* so = ss + bq * bk;
  A* sm = so + bq * ev;
  A* sl = sm + bq;
  A* sr = sl + bq;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;

  load_rows(q + (b * d.l + i0) * e, rows, e, sq, lde, static_cast<A>(d.scale));
  zero(so, bq * ev);
  for (int r = threadIdx.x; r < bq; r += blockDim.x) {
    sm[r] = -INFINITY;
    sl[r] = 0;
  }
  const int64_t end = d.causal ? min64(d.s, i0 + rows) : d.s;  // keys [0, end) are seen
  for (int64_t j0 = 0; j0 < end; j0 += bk) {
    const int cols = static_cast<int>(min64(bk, end - j0));
    __syncthreads();  // the previous tile's readers of sk, sv and ss are done
    load_rows(k + (b * d.s + j0) * e, cols, e, sk, lde, A(1));
    load_rows(v + (b * d.s + j0) * ev, cols, ev, sv, ev, A(1));
    __syncthreads();
    for (int idx = threadIdx.x; idx < bq * bk; idx += blockDim.x) {
      const int r = idx / bk, c = idx % bk;
      ss[idx] = visible(r, rows, c, cols, i0, j0, d.causal) ? score(sq, sk, r, c, lde, e) : A(-INFINITY);
    }
    __syncthreads();
    // A warp per query row: the new running max, the tile's probabilities and the rescale of
    // what was accumulated so far. Lane 0 writes sm/sl only after the shuffles, which every lane
    // reaches after its reads of them.
    for (int r = warp; r < bq; r += warps) {
      A* s = ss + r * bk;
      const A old_max = sm[r];
      A mx = old_max;
      for (int c = lane; c < bk; c += 32) mx = max(mx, s[c]);
      mx = warp_reduce(mx, MaxOp{});
      if (mx == A(-INFINITY)) {  // nothing visible yet (or a padding row): the tile adds nothing
        for (int c = lane; c < bk; c += 32) s[c] = 0;
        if (lane == 0) sr[r] = 1;
        continue;
      }
      A total = 0;
      for (int c = lane; c < bk; c += 32) {
        const A p = m_exp(s[c] - mx);
        total += p;  // undropped: the normaliser and the logsumexp
        s[c] = drop && c < cols ? p * dropout_factor(d, kept, b, i0 + r, j0 + c) : p;
      }
      total = warp_reduce(total, SumOp{});
      if (lane == 0) {
        const A rescale = m_exp(old_max - mx);  // 0 on the first visible tile
        sr[r] = rescale;
        sl[r] = sl[r] * rescale + total;
        sm[r] = mx;
      }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < bq * ev; idx += blockDim.x) {
      const int r = idx / ev, t = idx % ev;
      const A* p = ss + r * bk;
      A acc = so[idx] * sr[r];
      for (int c = 0; c < cols; ++c) acc += p[c] * sv[c * ev + t];
      so[idx] = acc;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < rows * ev; idx += blockDim.x) {
    const int r = idx / ev;
    out[(b * d.l + i0) * ev + idx] = convert<T>(so[idx] * (A(1) / sl[r]));
  }
  for (int r = threadIdx.x; r < rows; r += blockDim.x) lse[b * d.l + i0 + r] = sm[r] + m_log(sl[r]);
}

// ---- Backward.

// D[row] = sum_t dO[row, t] * O[row, t], a warp per row.
template <class T>
__global__ void attention_row_dot(const T* __restrict__ grad_out, const T* __restrict__ out, int64_t rows, int ev,
                                  acc_t<T>* __restrict__ dot) {
  using A = acc_t<T>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together
  A sum = 0;
  for (int t = lane; t < ev; t += 32) sum += convert<A>(grad_out[row * ev + t]) * convert<A>(out[row * ev + t]);
  sum = warp_reduce(sum, SumOp{});
  if (lane == 0) dot[row] = sum;
}

// dS = P * (f dP - D) for the (r, c) entry of a tile, P recomputed as exp(q.k - lse) (0 where
// not visible), dP = dO.v, f the entry's dropout factor (1 without dropout); p returns P f, what
// dV takes. Shared by the dK/dV and the dQ kernels so both see the same values.
template <class A>
__device__ __forceinline__ void prob_and_grad(const A* sq, const A* sk, const A* sdo, const A* sv, const A* slse,
                                              const A* sd, int r, int c, int lde, int ldv, int e, int ev, A f, A& p,
                                              A& ds) {
  p = m_exp(score(sq, sk, r, c, lde, e) - slse[r]);
  A dp = 0;
  for (int t = 0; t < ev; ++t) dp += sdo[r * ldv + t] * sv[c * ldv + t];
  ds = p * (dp * f - sd[r]);
  p *= f;
}

// Loads a query tile's operands: sq (scaled), sdo, lse and D.
template <class T, class A>
__device__ __forceinline__ void load_query_tile(const T* q, const T* grad_out, const A* lse, const A* dvec,
                                                const AttentionDims& d, int64_t b, int64_t i0, int rows, A* sq, A* sdo,
                                                A* slse, A* sd) {
  const int e = static_cast<int>(d.e), ev = static_cast<int>(d.ev);
  load_rows(q + (b * d.l + i0) * e, rows, e, sq, e + 1, static_cast<A>(d.scale));
  load_rows(grad_out + (b * d.l + i0) * ev, rows, ev, sdo, ev + 1, A(1));
  for (int r = threadIdx.x; r < rows; r += blockDim.x) {
    slse[r] = lse[b * d.l + i0 + r];
    sd[r] = dvec[b * d.l + i0 + r];
  }
}

// dK/dV shared memory: sk [bk][e+1], sv [bk][ev+1], sdk [bk][e], sdv [bk][ev], sq [bq][e+1],
// sdo [bq][ev+1], sp and sds [bq][bk], lse and D [bq].
template <class A>
size_t key_pass_smem(const AttentionDims& d, Tile t) {
  const size_t lde = d.e + 1, ldv = d.ev + 1;
  return sizeof(A) * (t.bk * (lde + ldv + d.e + d.ev) + t.bq * (lde + ldv) + 2 * t.bq * t.bk + 2 * t.bq);
}

template <class T>
__global__ void __launch_bounds__(attention::kThreads)
    attention_backward_keys(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                            const T* __restrict__ grad_out, const acc_t<T>* __restrict__ lse,
                            const acc_t<T>* __restrict__ dvec, AttentionDims d, Tile tile, acc_t<T> kept,
                            T* __restrict__ grad_k, T* __restrict__ grad_v) {
  using A = acc_t<T>;
  const bool drop = d.dropout_p > 0.0;
  extern __shared__ __align__(16) unsigned char smem[];
  const int bq = tile.bq, bk = tile.bk, e = static_cast<int>(d.e), ev = static_cast<int>(d.ev);
  const int lde = e + 1, ldv = ev + 1;
  const int64_t tiles = (d.s + bk - 1) / bk;
  const int64_t b = blockIdx.x / tiles, j0 = blockIdx.x % tiles * bk;
  const int cols = static_cast<int>(min64(bk, d.s - j0));
  A* sk = reinterpret_cast<A*>(smem);
  A* sv = sk + bk * lde;
  A* sdk = sv + bk * ldv;
  A* sdv = sdk + bk * e;
  A* sq = sdv + bk * ev;
  A* sdo = sq + bq * lde;
  A* sp = sdo + bq * ldv;
  A* sds = sp + bq * bk;
  A* slse = sds + bq * bk;
  A* sd = slse + bq;

  load_rows(k + (b * d.s + j0) * e, cols, e, sk, lde, A(1));
  load_rows(v + (b * d.s + j0) * ev, cols, ev, sv, ldv, A(1));
  zero(sdk, bk * e);
  zero(sdv, bk * ev);
  // Causal: query i sees key j0 only if i >= j0, so the first query tile needed is j0's.
  for (int64_t i0 = d.causal ? j0 / bq * bq : 0; i0 < d.l; i0 += bq) {
    const int rows = static_cast<int>(min64(bq, d.l - i0));
    __syncthreads();  // the previous tile's readers of sq, sdo, sp and sds are done
    load_query_tile(q, grad_out, lse, dvec, d, b, i0, rows, sq, sdo, slse, sd);
    __syncthreads();
    for (int idx = threadIdx.x; idx < bq * bk; idx += blockDim.x) {
      const int r = idx / bk, c = idx % bk;
      A p = 0, ds = 0;
      if (visible(r, rows, c, cols, i0, j0, d.causal)) {
        const A f = drop ? dropout_factor(d, kept, b, i0 + r, j0 + c) : A(1);
        prob_and_grad(sq, sk, sdo, sv, slse, sd, r, c, lde, ldv, e, ev, f, p, ds);
      }
      sp[idx] = p;
      sds[idx] = ds;
    }
    __syncthreads();
    // dV += P^T dO, dK += dS^T (scale q): a thread per element, summed over the tile's rows in order.
    for (int idx = threadIdx.x; idx < cols * ev; idx += blockDim.x) {
      const int c = idx / ev, t = idx % ev;
      A acc = sdv[idx];
      for (int r = 0; r < rows; ++r) acc += sp[r * bk + c] * sdo[r * ldv + t];
      sdv[idx] = acc;
    }
    for (int idx = threadIdx.x; idx < cols * e; idx += blockDim.x) {
      const int c = idx / e, t = idx % e;
      A acc = sdk[idx];
      for (int r = 0; r < rows; ++r) acc += sds[r * bk + c] * sq[r * lde + t];
      sdk[idx] = acc;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < cols * e; idx += blockDim.x)
    grad_k[(b * d.s + j0) * e + idx] = convert<T>(sdk[idx]);
  for (int idx = threadIdx.x; idx < cols * ev; idx += blockDim.x)
    grad_v[(b * d.s + j0) * ev + idx] = convert<T>(sdv[idx]);
}

// dQ shared memory: sq [bq][e+1], sdo [bq][ev+1], sdq [bq][e], lse and D [bq], sk [bk][e+1],
// sv [bk][ev+1], sds [bq][bk].
template <class A>
size_t query_pass_smem(const AttentionDims& d, Tile t) {
  const size_t lde = d.e + 1, ldv = d.ev + 1;
  return sizeof(A) * (t.bq * (lde + ldv + d.e + 2) + t.bk * (lde + ldv) + t.bq * t.bk);
}

template <class T>
__global__ void __launch_bounds__(attention::kThreads)
    attention_backward_queries(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                               const T* __restrict__ grad_out, const acc_t<T>* __restrict__ lse,
                               const acc_t<T>* __restrict__ dvec, AttentionDims d, Tile tile, acc_t<T> kept,
                               T* __restrict__ grad_q) {
  using A = acc_t<T>;
  const bool drop = d.dropout_p > 0.0;
  extern __shared__ __align__(16) unsigned char smem[];
  const int bq = tile.bq, bk = tile.bk, e = static_cast<int>(d.e), ev = static_cast<int>(d.ev);
  const int lde = e + 1, ldv = ev + 1;
  const int64_t tiles = (d.l + bq - 1) / bq;
  const int64_t b = blockIdx.x / tiles, i0 = blockIdx.x % tiles * bq;
  const int rows = static_cast<int>(min64(bq, d.l - i0));
  A* sq = reinterpret_cast<A*>(smem);
  A* sdo = sq + bq * lde;
  A* sdq = sdo + bq * ldv;
  A* slse = sdq + bq * e;
  A* sd = slse + bq;
  A* sk = sd + bq;
  A* sv = sk + bk * lde;
  A* sds = sv + bk * ldv;

  load_query_tile(q, grad_out, lse, dvec, d, b, i0, rows, sq, sdo, slse, sd);
  zero(sdq, bq * e);
  const int64_t end = d.causal ? min64(d.s, i0 + rows) : d.s;
  for (int64_t j0 = 0; j0 < end; j0 += bk) {
    const int cols = static_cast<int>(min64(bk, end - j0));
    __syncthreads();  // the previous tile's readers of sk, sv and sds are done
    load_rows(k + (b * d.s + j0) * e, cols, e, sk, lde, A(1));
    load_rows(v + (b * d.s + j0) * ev, cols, ev, sv, ldv, A(1));
    __syncthreads();
    for (int idx = threadIdx.x; idx < bq * bk; idx += blockDim.x) {
      const int r = idx / bk, c = idx % bk;
      A p = 0, ds = 0;
      if (visible(r, rows, c, cols, i0, j0, d.causal)) {
        const A f = drop ? dropout_factor(d, kept, b, i0 + r, j0 + c) : A(1);
        prob_and_grad(sq, sk, sdo, sv, slse, sd, r, c, lde, ldv, e, ev, f, p, ds);
      }
      sds[idx] = ds;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < rows * e; idx += blockDim.x) {  // dQ' += dS K
      const int r = idx / e, t = idx % e;
      A acc = sdq[idx];
      for (int c = 0; c < cols; ++c) acc += sds[r * bk + c] * sk[c * lde + t];
      sdq[idx] = acc;
    }
  }
  __syncthreads();
  const A scale = static_cast<A>(d.scale);
  for (int idx = threadIdx.x; idx < rows * e; idx += blockDim.x)
    grad_q[(b * d.l + i0) * e + idx] = convert<T>(sdq[idx] * scale);
}

// The largest square tile whose shared memory fits the default 48 KB, else the smallest one with
// the kernel opted in to the device's maximum.
template <class Kernel>
Tile choose_tile(Kernel kernel, const char* name, size_t (*bytes)(const AttentionDims&, Tile), const AttentionDims& d) {
  for (int t : {32, 16}) {
    const Tile tile{t, t, bytes(d, Tile{t, t, 0})};
    if (tile.smem <= attention::kDefaultSmem) return tile;
  }
  const Tile tile{8, 8, bytes(d, Tile{8, 8, 0})};
  attention::allow_smem(kernel, name, tile.smem);
  return tile;
}

// 1 / (1 - p) rounded to T, as the dropout kernels scale (random.cu); 1 without dropout.
template <class T>
acc_t<T> kept_factor(const AttentionDims& d) {
  return d.dropout_p > 0.0 ? static_cast<acc_t<T>>(host_value<T>(1.0 / (1.0 - d.dropout_p))) : acc_t<T>(1);
}

}  // namespace

void attention_forward(DType dtype, const void* q, const void* k, const void* v, const AttentionDims& d, void* out,
                       void* lse, cudaStream_t stream) {
  if (d.batch == 0 || d.l == 0) return;
  if (attention::forward_mma(dtype, q, k, v, d, out, lse, stream)) return;
  dispatch_floating(dtype, "attention_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const auto kernel = attention_forward_generic<T>;
    const Tile tile = choose_tile(kernel, "attention_forward", forward_smem<A>, d);
    const int64_t blocks = d.batch * ((d.l + tile.bq - 1) / tile.bq);
    attention::check_grid(blocks, "attention_forward");
    kernel<<<static_cast<unsigned>(blocks), attention::kThreads, tile.smem, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), d, tile, kept_factor<T>(d),
        static_cast<T*>(out), static_cast<A*>(lse));
  });
  check_launch("attention_forward");
}

void attention_backward(DType dtype, const void* q, const void* k, const void* v, const void* out, const void* grad_out,
                        const void* lse, const AttentionDims& d, void* grad_q, void* grad_k, void* grad_v,
                        void* workspace, cudaStream_t stream) {
  if (d.batch == 0) return;
  dispatch_floating(dtype, "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T *tq = static_cast<const T*>(q), *tk = static_cast<const T*>(k), *tv = static_cast<const T*>(v);
    const T* tg = static_cast<const T*>(grad_out);
    const A* tl = static_cast<const A*>(lse);
    A* dvec = static_cast<A*>(workspace);
    const int64_t rows = d.batch * d.l;
    if (rows > 0) {
      attention::check_grid((rows + 7) / 8, "attention_backward");
      attention_row_dot<T><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(
          tg, static_cast<const T*>(out), rows, static_cast<int>(d.ev), dvec);
      check_launch("attention_backward (rowsum(dO * O))");
    }
    if (attention::backward_mma(dtype, q, k, v, grad_out, lse, dvec, d, grad_q, grad_k, grad_v, stream)) return;
    {
      const auto kernel = attention_backward_keys<T>;
      const Tile tile = choose_tile(kernel, "attention_backward (dK, dV)", key_pass_smem<A>, d);
      const int64_t blocks = d.batch * ((d.s + tile.bk - 1) / tile.bk);
      attention::check_grid(blocks, "attention_backward");
      kernel<<<static_cast<unsigned>(blocks), attention::kThreads, tile.smem, stream>>>(
          tq, tk, tv, tg, tl, dvec, d, tile, kept_factor<T>(d), static_cast<T*>(grad_k), static_cast<T*>(grad_v));
      check_launch("attention_backward (dK, dV)");
    }
    if (rows > 0) {
      const auto kernel = attention_backward_queries<T>;
      const Tile tile = choose_tile(kernel, "attention_backward (dQ)", query_pass_smem<A>, d);
      const int64_t blocks = d.batch * ((d.l + tile.bq - 1) / tile.bq);
      attention::check_grid(blocks, "attention_backward");
      kernel<<<static_cast<unsigned>(blocks), attention::kThreads, tile.smem, stream>>>(
          tq, tk, tv, tg, tl, dvec, d, tile, kept_factor<T>(d), static_cast<T*>(grad_q));
      check_launch("attention_backward (dQ)");
    }
  });
}

}  // namespace mixtrain::kernels
