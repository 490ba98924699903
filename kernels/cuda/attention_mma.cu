// Fused attention on tensor cores (nvcuda::wmma 16x16x16, fp32 accumulation) for fp16/bf16 with
// head dims that are multiples of 16 up to 128; attention.cu's generic kernels take the rest.
// The algorithm and the block/loop structure are the generic kernels'; here a block has 4 warps,
// each owning 16 rows of the block's 64-row tile, and loops over 32-row tiles of the other side.
// Products go through wmma fragments read from and written to shared memory (a fragment's
// element layout is unspecified, so every elementwise step works on shared memory instead):
// - forward: S = Q K^T -> the online softmax on S * scale in fp32 -> P rounded to T ->
//   O (fp32, shared memory) = O * rescale + P V;
// - dK/dV (a block per 64 keys): S^T = K Q^T, dP^T = V dO^T -> P^T and dS^T = P^T (dP^T - D)
//   rounded to T -> dV += P^T dO, dK += dS^T Q, accumulated in fragments;
// - dQ (a block per 64 queries): S = Q K^T, dP = dO V^T -> dS -> dQ += dS K.
// Scores are scaled in fp32 after the product, q stays unscaled in T. The running softmax sum
// and the logsumexp use the fp32 probabilities; only the products' operands are rounded, as in
// FlashAttention. Every output element is produced by one warp in a fixed order: deterministic.
#include <mma.h>

#include <atomic>

#include "attention_common.cuh"

namespace mixtrain::kernels::attention {

namespace {

using namespace nvcuda;

constexpr int kWarps = 4, kMmaThreads = 32 * kWarps;
constexpr int kOwn = 16 * kWarps;  // rows a block owns
constexpr int kStep = 32;          // rows of the other side per loop step (one per lane)
constexpr int kMaxFrags = 128 / 16;
constexpr int ldS = kStep + 4;  // per-warp fp32 tiles [16][ldS]
constexpr int ldP = kStep + 8;  // per-warp T tiles [16][ldP]
static_assert(kStep == 32, "the elementwise steps give each lane one row of the other side");

template <class T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <class T>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <class T>  // B = M^T for a row-major M
using FragBT = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Row strides (elements) of T tiles of width e (a multiple of 16): a multiple of 8, wmma's rule
// for 16-bit types, but an odd one, so that successive rows start on different banks.
__host__ __device__ constexpr int padded(int64_t width) { return static_cast<int>(width) + 8; }

// dst[r][x] = src[r * width + x] for r < valid, 0 for valid <= r < rows.
template <class T>
__device__ __forceinline__ void load_tile(const T* __restrict__ src, int rows, int valid, int width, T* dst, int ld) {
  for (int idx = threadIdx.x; idx < rows * width; idx += blockDim.x) {
    const int r = idx / width, x = idx % width;
    dst[r * ld + x] = r < valid ? src[static_cast<int64_t>(r) * width + x] : convert<T>(0.0f);
  }
}

// out[16][16 * nb] (fp32, row stride ldo) = A B^T over k = 16 * kf: A 16 rows of a row-major T
// tile (stride lda), B's rows the 16 * nb rows of another (stride ldb).
template <class T>
__device__ __forceinline__ void product_abt(const T* a, int lda, const T* b, int ldb, int nb, int kf, float* out,
                                            int ldo) {
  for (int n = 0; n < nb; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < kf; ++kk) {
      FragA<T> fa;
      FragBT<T> fb;
      wmma::load_matrix_sync(fa, a + kk * 16, lda);
      wmma::load_matrix_sync(fb, b + n * 16 * ldb + kk * 16, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, ldo, wmma::mem_row_major);
  }
}

// acc[f] += A B for f < nf: A [16][kStep] (T, stride lda), B [kStep][16 * nf] (T, stride ldb).
template <class T>
__device__ __forceinline__ void accumulate_ab(FragC (&acc)[kMaxFrags], int nf, const T* a, int lda, const T* b,
                                              int ldb) {
#pragma unroll
  for (int f = 0; f < kMaxFrags; ++f) {
    if (f >= nf) break;
#pragma unroll
    for (int kb = 0; kb < kStep / 16; ++kb) {
      FragA<T> fa;
      FragB<T> fb;
      wmma::load_matrix_sync(fa, a + kb * 16, lda);
      wmma::load_matrix_sync(fb, b + kb * 16 * ldb + f * 16, ldb);
      wmma::mma_sync(acc[f], fa, fb, acc[f]);
    }
  }
}

// Writes acc[f] (16 rows, the first `valid` kept) times mul into dst rows of width 16 * nf,
// through the warp's fp32 tile `stage` [16][ldS].
template <class T>
__device__ __forceinline__ void write_rows(FragC (&acc)[kMaxFrags], int nf, int valid, float mul, float* stage,
                                           T* __restrict__ dst) {
  const int lane = threadIdx.x % 32, width = 16 * nf;
#pragma unroll
  for (int f = 0; f < kMaxFrags; ++f) {
    if (f >= nf) break;
    wmma::store_matrix_sync(stage, acc[f], ldS, wmma::mem_row_major);
    __syncwarp();
    for (int idx = lane; idx < 16 * 16; idx += 32) {
      const int r = idx / 16, x = idx % 16;
      if (r < valid) dst[static_cast<int64_t>(r) * width + f * 16 + x] = convert<T>(stage[r * ldS + x] * mul);
    }
    __syncwarp();
  }
}

// ---- Forward. Shared memory: sq [kOwn][e+8], sk [kStep][e+8], sv [kStep][ev+8] (T); per warp
// ss [16][ldS] (fp32), sp [16][ldP] (T), so [16][ev+4] (fp32); running max and sum [kOwn].
size_t forward_bytes(const AttentionDims& d) {
  const size_t t = 2;  // sizeof(T)
  return t * (kOwn * padded(d.e) + kStep * padded(d.e) + kStep * padded(d.ev)) +
         kWarps * 16 * (4 * ldS + t * ldP + 4 * (d.ev + 4)) + 4 * 2 * kOwn;
}

template <class T>
__global__ void __launch_bounds__(kMmaThreads)
    attention_forward_mma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, AttentionDims d,
                          T* __restrict__ out, float* __restrict__ lse) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  const int e = static_cast<int>(d.e), ev = static_cast<int>(d.ev), ldq = padded(e), ldv = padded(ev), ldo = ev + 4;
  const int64_t tiles = (d.l + kOwn - 1) / kOwn;
  const int64_t b = blockIdx.x / tiles, i0 = blockIdx.x % tiles * kOwn;
  const int rows = static_cast<int>(min64(kOwn, d.l - i0));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale = static_cast<float>(d.scale);
  T* sq = reinterpret_cast<T*>(smem);
  T* sk = sq + kOwn * ldq;
  T* sv = sk + kStep * ldq;
  float* ss = reinterpret_cast<float*>(sv + kStep * ldv);
  T* sp = reinterpret_cast<T*>(ss + kWarps * 16 * ldS);
  float* so = reinterpret_cast<float*>(sp + kWarps * 16 * ldP);
  float* sm = so + kWarps * 16 * ldo;
  float* sl = sm + kOwn;
  const T* wq = sq + warp * 16 * ldq;
  float* ws = ss + warp * 16 * ldS;
  T* wp = sp + warp * 16 * ldP;
  float* wo = so + warp * 16 * ldo;  // = so + (16 * warp) * ldo: rows are the block's rows

  load_tile(q + (b * d.l + i0) * e, kOwn, rows, e, sq, ldq);
  for (int idx = threadIdx.x; idx < kOwn * ldo; idx += blockDim.x) so[idx] = 0;
  for (int r = threadIdx.x; r < kOwn; r += blockDim.x) {
    sm[r] = -INFINITY;
    sl[r] = 0;
  }
  const int64_t end = d.causal ? min64(d.s, i0 + rows) : d.s;
  for (int64_t j0 = 0; j0 < end; j0 += kStep) {
    const int cols = static_cast<int>(min64(kStep, end - j0));
    __syncthreads();  // every warp is done with the previous sk and sv
    load_tile(k + (b * d.s + j0) * e, kStep, cols, e, sk, ldq);
    load_tile(v + (b * d.s + j0) * ev, kStep, cols, ev, sv, ldv);
    __syncthreads();
    product_abt(wq, ldq, sk, ldq, kStep / 16, e / 16, ws, ldS);
    __syncwarp();
    // A row at a time, lane = key: the online softmax; lane 0 updates sm/sl after the shuffles,
    // which every lane reaches after reading them.
    for (int rr = 0; rr < 16; ++rr) {
      const int r = warp * 16 + rr;
      const bool seen = r < rows && lane < cols && !(d.causal && j0 + lane > i0 + r);
      const float s = seen ? ws[rr * ldS + lane] * scale : -INFINITY;
      const float old_max = sm[r];
      const float mx = warp_reduce(max(old_max, s), MaxOp{});
      float p = 0, rescale = 1;
      if (mx != -INFINITY) {  // else nothing seen yet (or a padding row): the tile adds nothing
        p = m_exp(s - mx);
        rescale = m_exp(old_max - mx);
      }
      wp[rr * ldP + lane] = convert<T>(p);
      const float total = warp_reduce(p, SumOp{});
      if (lane == 0 && mx != -INFINITY) {
        sl[r] = sl[r] * rescale + total;
        sm[r] = mx;
      }
      for (int t = lane; t < ev; t += 32) wo[rr * ldo + t] *= rescale;
    }
    __syncwarp();
    for (int f = 0; f < ev / 16; ++f) {  // O = O * rescale (done above) + P V
      FragC acc;
      wmma::load_matrix_sync(acc, wo + f * 16, ldo, wmma::mem_row_major);
      for (int kb = 0; kb < kStep / 16; ++kb) {
        FragA<T> fa;
        FragB<T> fb;
        wmma::load_matrix_sync(fa, wp + kb * 16, ldP);
        wmma::load_matrix_sync(fb, sv + kb * 16 * ldv + f * 16, ldv);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(wo + f * 16, acc, ldo, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < rows * ev; idx += blockDim.x) {
    const int r = idx / ev, t = idx % ev;
    out[(b * d.l + i0 + r) * ev + t] = convert<T>(so[r * ldo + t] * (1.0f / sl[r]));
  }
  for (int r = threadIdx.x; r < rows; r += blockDim.x) lse[b * d.l + i0 + r] = sm[r] + m_log(sl[r]);
#else
  __trap();  // the host picks these kernels only on sm_80 and later
#endif
}

// ---- dK and dV: a block per 64 keys, looping over 32-query tiles. Shared memory: sk [kOwn][e+8],
// sv [kOwn][ev+8], sq [kStep][e+8], sdo [kStep][ev+8] (T); lse and D [kStep]; per warp sst and
// sdpt [16][ldS] (fp32), spt and sdst [16][ldP] (T).
size_t keys_bytes(const AttentionDims& d) {
  const size_t t = 2;
  return t * (kOwn + kStep) * (padded(d.e) + padded(d.ev)) + 4 * 2 * kStep + kWarps * 16 * (4 * 2 * ldS + t * 2 * ldP);
}

template <class T>
__global__ void __launch_bounds__(kMmaThreads)
    attention_backward_keys_mma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                const T* __restrict__ grad_out, const float* __restrict__ lse,
                                const float* __restrict__ dvec, AttentionDims d, T* __restrict__ grad_k,
                                T* __restrict__ grad_v) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  const int e = static_cast<int>(d.e), ev = static_cast<int>(d.ev), ldq = padded(e), ldv = padded(ev);
  const int64_t tiles = (d.s + kOwn - 1) / kOwn;
  const int64_t b = blockIdx.x / tiles, j0 = blockIdx.x % tiles * kOwn;
  const int cols = static_cast<int>(min64(kOwn, d.s - j0));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale = static_cast<float>(d.scale);
  T* sk = reinterpret_cast<T*>(smem);
  T* sv = sk + kOwn * ldq;
  T* sq = sv + kOwn * ldv;
  T* sdo = sq + kStep * ldq;
  float* slse = reinterpret_cast<float*>(sdo + kStep * ldv);
  float* sd = slse + kStep;
  float* sst = sd + kStep;
  float* sdpt = sst + kWarps * 16 * ldS;
  T* spt = reinterpret_cast<T*>(sdpt + kWarps * 16 * ldS);
  T* sdst = spt + kWarps * 16 * ldP;
  const T* wk = sk + warp * 16 * ldq;
  const T* wv = sv + warp * 16 * ldv;
  float* wst = sst + warp * 16 * ldS;
  float* wdpt = sdpt + warp * 16 * ldS;
  T* wpt = spt + warp * 16 * ldP;
  T* wdst = sdst + warp * 16 * ldP;

  load_tile(k + (b * d.s + j0) * e, kOwn, cols, e, sk, ldq);
  load_tile(v + (b * d.s + j0) * ev, kOwn, cols, ev, sv, ldv);
  FragC dk[kMaxFrags], dv[kMaxFrags];
#pragma unroll
  for (int f = 0; f < kMaxFrags; ++f) {
    wmma::fill_fragment(dk[f], 0.0f);
    wmma::fill_fragment(dv[f], 0.0f);
  }
  // Causal: query i sees key j only if i >= j, so the first query tile needed holds query j0.
  for (int64_t i0 = d.causal ? j0 / kStep * kStep : 0; i0 < d.l; i0 += kStep) {
    const int rows = static_cast<int>(min64(kStep, d.l - i0));
    __syncthreads();  // every warp is done with the previous query tile
    load_tile(q + (b * d.l + i0) * e, kStep, rows, e, sq, ldq);
    load_tile(grad_out + (b * d.l + i0) * ev, kStep, rows, ev, sdo, ldv);
    for (int r = threadIdx.x; r < kStep; r += blockDim.x) {
      slse[r] = r < rows ? lse[b * d.l + i0 + r] : 0.0f;
      sd[r] = r < rows ? dvec[b * d.l + i0 + r] : 0.0f;
    }
    __syncthreads();
    product_abt(wk, ldq, sq, ldq, kStep / 16, e / 16, wst, ldS);     // S^T = K Q^T
    product_abt(wv, ldv, sdo, ldv, kStep / 16, ev / 16, wdpt, ldS);  // dP^T = V dO^T
    __syncwarp();
    for (int cc = 0; cc < 16; ++cc) {  // key row cc of the warp, lane = query
      const int c = warp * 16 + cc;
      const bool seen = c < cols && lane < rows && !(d.causal && j0 + c > i0 + lane);
      const float p = seen ? m_exp(wst[cc * ldS + lane] * scale - slse[lane]) : 0.0f;
      const float ds = p * (wdpt[cc * ldS + lane] - sd[lane]);
      wpt[cc * ldP + lane] = convert<T>(p);
      wdst[cc * ldP + lane] = convert<T>(ds);
    }
    __syncwarp();
    accumulate_ab(dv, ev / 16, wpt, ldP, sdo, ldv);  // dV += P^T dO
    accumulate_ab(dk, e / 16, wdst, ldP, sq, ldq);   // dK += dS^T Q (times scale at the end)
  }
  const int valid = max(0, min(16, cols - warp * 16));
  write_rows(dk, e / 16, valid, scale, wst, grad_k + (b * d.s + j0 + warp * 16) * e);
  write_rows(dv, ev / 16, valid, 1.0f, wst, grad_v + (b * d.s + j0 + warp * 16) * ev);
#else
  __trap();
#endif
}

// ---- dQ: a block per 64 queries, looping over 32-key tiles. Shared memory: sq [kOwn][e+8],
// sdo [kOwn][ev+8], sk [kStep][e+8], sv [kStep][ev+8] (T); lse and D [kOwn]; per warp ss and
// sdp [16][ldS] (fp32), sds [16][ldP] (T).
size_t queries_bytes(const AttentionDims& d) {
  const size_t t = 2;
  return t * (kOwn + kStep) * (padded(d.e) + padded(d.ev)) + 4 * 2 * kOwn + kWarps * 16 * (4 * 2 * ldS + t * ldP);
}

template <class T>
__global__ void __launch_bounds__(kMmaThreads)
    attention_backward_queries_mma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                   const T* __restrict__ grad_out, const float* __restrict__ lse,
                                   const float* __restrict__ dvec, AttentionDims d, T* __restrict__ grad_q) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  const int e = static_cast<int>(d.e), ev = static_cast<int>(d.ev), ldq = padded(e), ldv = padded(ev);
  const int64_t tiles = (d.l + kOwn - 1) / kOwn;
  const int64_t b = blockIdx.x / tiles, i0 = blockIdx.x % tiles * kOwn;
  const int rows = static_cast<int>(min64(kOwn, d.l - i0));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float scale = static_cast<float>(d.scale);
  T* sq = reinterpret_cast<T*>(smem);
  T* sdo = sq + kOwn * ldq;
  T* sk = sdo + kOwn * ldv;
  T* sv = sk + kStep * ldq;
  float* slse = reinterpret_cast<float*>(sv + kStep * ldv);
  float* sd = slse + kOwn;
  float* ss = sd + kOwn;
  float* sdp = ss + kWarps * 16 * ldS;
  T* sds = reinterpret_cast<T*>(sdp + kWarps * 16 * ldS);
  const T* wq = sq + warp * 16 * ldq;
  const T* wdo = sdo + warp * 16 * ldv;
  float* ws = ss + warp * 16 * ldS;
  float* wdp = sdp + warp * 16 * ldS;
  T* wds = sds + warp * 16 * ldP;

  load_tile(q + (b * d.l + i0) * e, kOwn, rows, e, sq, ldq);
  load_tile(grad_out + (b * d.l + i0) * ev, kOwn, rows, ev, sdo, ldv);
  for (int r = threadIdx.x; r < kOwn; r += blockDim.x) {
    slse[r] = r < rows ? lse[b * d.l + i0 + r] : 0.0f;
    sd[r] = r < rows ? dvec[b * d.l + i0 + r] : 0.0f;
  }
  FragC dq[kMaxFrags];
#pragma unroll
  for (int f = 0; f < kMaxFrags; ++f) wmma::fill_fragment(dq[f], 0.0f);
  const int64_t end = d.causal ? min64(d.s, i0 + rows) : d.s;
  for (int64_t j0 = 0; j0 < end; j0 += kStep) {
    const int cols = static_cast<int>(min64(kStep, end - j0));
    __syncthreads();  // every warp is done with the previous sk and sv
    load_tile(k + (b * d.s + j0) * e, kStep, cols, e, sk, ldq);
    load_tile(v + (b * d.s + j0) * ev, kStep, cols, ev, sv, ldv);
    __syncthreads();
    product_abt(wq, ldq, sk, ldq, kStep / 16, e / 16, ws, ldS);     // S = Q K^T
    product_abt(wdo, ldv, sv, ldv, kStep / 16, ev / 16, wdp, ldS);  // dP = dO V^T
    __syncwarp();
    for (int rr = 0; rr < 16; ++rr) {  // query row rr of the warp, lane = key
      const int r = warp * 16 + rr;
      const bool seen = r < rows && lane < cols && !(d.causal && j0 + lane > i0 + r);
      const float p = seen ? m_exp(ws[rr * ldS + lane] * scale - slse[r]) : 0.0f;
      wds[rr * ldP + lane] = convert<T>(p * (wdp[rr * ldS + lane] - sd[r]));
    }
    __syncwarp();
    accumulate_ab(dq, e / 16, wds, ldP, sk, ldq);  // dQ += dS K (times scale at the end)
  }
  const int valid = max(0, min(16, rows - warp * 16));
  write_rows(dq, e / 16, valid, scale, ws, grad_q + (b * d.l + i0 + warp * 16) * e);
#else
  __trap();
#endif
}

// Whether the tensor-core kernels take this call: fp16/bf16, head dims multiples of 16 up to
// 128, on sm_80 or later (bf16 wmma), no dropout. Dropout calls go to the generic kernels
// (attention.cu), which apply it: one implementation of the mask to check against the CPU's while
// these kernels' fragment layouts stay out of it, at the generic kernels' speed for such calls.
// Whether the current device runs these kernels' tensor-core bodies: the code loaded for it must
// come from sm_80 or later (a build whose only code for this device is older PTX, JIT-compiled,
// holds the __trap() bodies). Asked once per device, as the devices of a process may differ.
bool mma_built_for_current_device() {
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices] = {};  // 0 not asked yet, 1 yes, -1 no
  int device = 0;
  MT_CHECK(cudaGetDevice(&device) == cudaSuccess, "attention: cudaGetDevice failed");
  const bool cached = device >= 0 && device < kDevices;
  if (cached)
    if (const int k = known[device].load(std::memory_order_relaxed)) return k > 0;
  cudaFuncAttributes attr{};
  MT_CHECK(cudaFuncGetAttributes(&attr, attention_forward_mma<__half>) == cudaSuccess,
           "attention: cudaFuncGetAttributes failed");
  const bool yes = attr.ptxVersion >= 80;
  if (cached) known[device].store(yes ? 1 : -1, std::memory_order_relaxed);
  return yes;
}

bool applies(DType dtype, const AttentionDims& d) {
  if (d.dropout_p > 0.0) return false;
  if ((dtype != DType::Float16 && dtype != DType::BFloat16) || d.e % 16 != 0 || d.ev % 16 != 0 || d.e > 128 ||
      d.ev > 128)
    return false;
  return mma_built_for_current_device();
}

template <class F>
void dispatch_half(DType dtype, F&& f) {
  if (dtype == DType::Float16) f(Tag<__half>{});
  else f(Tag<__nv_bfloat16>{});
}

}  // namespace

bool forward_mma(DType dtype, const void* q, const void* k, const void* v, const AttentionDims& d, void* out, void* lse,
                 cudaStream_t stream) {
  if (!applies(dtype, d)) return false;
  dispatch_half(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto kernel = attention_forward_mma<T>;
    const size_t bytes = forward_bytes(d);
    allow_smem(kernel, "attention_forward", bytes);
    const int64_t blocks = d.batch * ((d.l + kOwn - 1) / kOwn);
    check_grid(blocks, "attention_forward");
    kernel<<<static_cast<unsigned>(blocks), kMmaThreads, bytes, stream>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), d, static_cast<T*>(out),
        static_cast<float*>(lse));
  });
  check_launch("attention_forward (tensor cores)");
  return true;
}

bool backward_mma(DType dtype, const void* q, const void* k, const void* v, const void* grad_out, const void* lse,
                  const void* dvec, const AttentionDims& d, void* grad_q, void* grad_k, void* grad_v,
                  cudaStream_t stream) {
  if (!applies(dtype, d)) return false;
  dispatch_half(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *tq = static_cast<const T*>(q), *tk = static_cast<const T*>(k), *tv = static_cast<const T*>(v);
    const T* tg = static_cast<const T*>(grad_out);
    const float *tl = static_cast<const float*>(lse), *td = static_cast<const float*>(dvec);
    {
      const auto kernel = attention_backward_keys_mma<T>;
      const size_t bytes = keys_bytes(d);
      allow_smem(kernel, "attention_backward (dK, dV)", bytes);
      const int64_t blocks = d.batch * ((d.s + kOwn - 1) / kOwn);
      check_grid(blocks, "attention_backward");
      kernel<<<static_cast<unsigned>(blocks), kMmaThreads, bytes, stream>>>(
          tq, tk, tv, tg, tl, td, d, static_cast<T*>(grad_k), static_cast<T*>(grad_v));
      check_launch("attention_backward (dK, dV, tensor cores)");
    }
    if (d.l > 0) {
      const auto kernel = attention_backward_queries_mma<T>;
      const size_t bytes = queries_bytes(d);
      allow_smem(kernel, "attention_backward (dQ)", bytes);
      const int64_t blocks = d.batch * ((d.l + kOwn - 1) / kOwn);
      check_grid(blocks, "attention_backward");
      kernel<<<static_cast<unsigned>(blocks), kMmaThreads, bytes, stream>>>(tq, tk, tv, tg, tl, td, d,
                                                                            static_cast<T*>(grad_q));
      check_launch("attention_backward (dQ, tensor cores)");
    }
  });
  return true;
}

}  // namespace mixtrain::kernels::attention
