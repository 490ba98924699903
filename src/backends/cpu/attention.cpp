// Fused scaled-dot-product attention on the CPU (FlashAttention-2's algorithm). Forward: one work
// item per (batch x head, query tile) runs over the key tiles with an online softmax (running max
// and sum per query, output accumulated unnormalised in fp32) and saves the logsumexp. Backward:
// one work item per batch x head runs over the key tiles, recomputing each probability tile from
// q, k and the logsumexp, with D = rowsum(dO * O); dK and dV of a key tile are finished in place,
// dQ accumulates in an fp32 buffer of [L, E]. Dropout (FlashAttention-2's): forward scales the
// probabilities that multiply V by the counter-based mask while the running sum (and so the
// logsumexp) stays that of the undropped ones; backward regenerates the mask from the seed, for
// dV = (P o M)^T dO and dS = P o (M o dP - D), where D = rowsum(dO * O) needs no change because O
// already holds the dropout. Tile products go through the Eigen GEMM. Work items
// never share an output element and each computes the same way whatever thread runs it, so the
// results do not depend on the thread count. Extra memory: fp32 copies of half operands and
// per-thread tiles, O(sequence).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <limits>
#include <vector>

#include <immintrin.h>

#include "backends/attention.h"
#include "backends/cpu/cpu_backend.h"
#include "kernels/cpu/gemm_eigen.h"
#include "backends/cpu/loops.h"
#include "mixtrain/base/rng.h"

namespace mixtrain::backends::cpu {

namespace {

// Tile sizes: a work item's query rows (forward) and the other side of each tile product, wider
// so each GEMM call does more work for its fixed cost.
constexpr int64_t kTile = 64;       // forward: queries per item; backward: keys per tile
constexpr int64_t kWideTile = 256;  // forward: keys per tile; backward: queries per tile

// A [rows, cols] row-major matrix (ld = row stride), or its transpose.
template <class A>
GemmMatrix<A> rows_of(const A* p, int64_t rows, int64_t cols, int64_t ld) {
  return {p, rows, cols, ld, 1};
}
template <class A>
GemmMatrix<A> transposed(const A* p, int64_t rows, int64_t cols, int64_t ld) {  // of a [cols, rows] matrix
  return {p, rows, cols, 1, ld};
}
template <class A>
void gemm(const GemmMatrix<A>& a, const GemmMatrix<A>& b, A* out, int64_t ldc, bool accumulate) {
  gemm_product(GemmCall<A>{a, b, out, ldc, accumulate});
}

// t's values as acc_t<T>: t itself, or a widened copy from the allocator (so memory statistics
// see it).
template <class T>
const acc_t<T>* acc_values(const Tensor& t, Tensor& keep) {
  const T* p = static_cast<const T*>(t.raw_data());
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    return p;
  } else {
    keep = Tensor::empty({t.numel()}, TensorOptions(kFloat32));
    float* dst = static_cast<float*>(keep.raw_data());
    convert_parallel(p, t.numel(), dst);
    return dst;
  }
}

// Runs item(i, scratch) for i in [0, n), items dealt round-robin over the threads (causal query
// tiles differ in cost, so neighbours go to different threads); Scratch is per thread.
template <class Scratch, class Item>
void for_items(int64_t n, Item&& item) {
  const int parts = static_cast<int>(std::min<int64_t>(n, split_threads()));
  if (parts <= 1) {
    Scratch scratch;
    for (int64_t i = 0; i < n; ++i) item(i, scratch);
    return;
  }
  run_parallel(parts, [&](int p, int np) {
    Scratch scratch;
    for (int64_t i = p; i < n; i += np) item(i, scratch);
  });
}

// exp for the softmax's exponents (x <= 0 up to rounding): Cephes' expf, x = n ln2 + r with a
// degree-6 polynomial in r (about 1 ulp), branch-free so the loops vectorize, where libm's expf
// is a call per element and took most of the time. Below -87.3 (and for -inf) it gives 0.
inline float exp_fast(float x) {
  const float big = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const float xc = std::min(std::max(x, -87.3f), 88.3f);
  const float fx = (xc * 1.44269504088896341f + big) - big;
  const float r = xc - fx * 0.693359375f + fx * 2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(fx) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -87.3f ? 0.0f : y * scale;
}
inline double exp_fast(double x) { return std::exp(x); }  // fp64 keeps libm's accuracy

}  // namespace

// exp_fast on 16 floats with AVX-512 (the same reduction and polynomial, fused multiply-adds,
// 2^n by scalef), for the CPUs that have it: the build's portable code gets only SSE2 vectors.
// Called only when the AVX-512 GEMM copy is chosen at run time; its namespace (and the AVX2
// copy's below) is on tests/isa/check_isa.sh's list of dispatched copies.
namespace attention_avx512 {
// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_ps(), which it then warns
// about as uninitialized (a false positive fixed in later GCC).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"))) float exp_shifted(float* s, int64_t n, float shift) {
  const __m512 lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.3f), one = _mm512_set1_ps(1.0f);
  const __m512 vshift = _mm512_set1_ps(shift);
  __m512 sum = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    const __m512 x = _mm512_sub_ps(_mm512_loadu_ps(s + c), vshift);
    const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);  // and -inf; NaN stays NaN
    const __m512 xc = _mm512_min_ps(hi, _mm512_max_ps(lo, x));       // NaN in x passes through
    const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fmadd_ps(fx, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, one));
    y = _mm512_mask_blend_ps(under, _mm512_scalef_ps(y, fx), _mm512_setzero_ps());
    _mm512_storeu_ps(s + c, y);
    sum = _mm512_add_ps(sum, y);
  }
  float total = _mm512_reduce_add_ps(sum);
  for (; c < n; ++c) total += (s[c] = exp_fast(s[c] - shift));
  return total;
}
#pragma GCC diagnostic pop
}  // namespace attention_avx512

// The same on 8 floats with AVX2 and FMA, for CPUs without AVX-512 (AMD Zen 2/3, older Intel):
// 2^n is built in the exponent bits, exact as scalef is, since the clamp keeps n in [-126, 127].
namespace attention_avx2 {
__attribute__((target("avx2,fma"))) float exp_shifted(float* s, int64_t n, float shift) {
  const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.3f), one = _mm256_set1_ps(1.0f);
  const __m256 vshift = _mm256_set1_ps(shift);
  __m256 sum = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + c), vshift);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);       // and -inf; NaN stays NaN
    const __m256 xc = _mm256_min_ps(hi, _mm256_max_ps(lo, x));  // NaN in x passes through
    const __m256 fx = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fmadd_ps(fx, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, one));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
    _mm256_storeu_ps(s + c, y);
    sum = _mm256_add_ps(sum, y);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0.0f;
  for (float v : lanes) total += v;
  for (; c < n; ++c) total += (s[c] = exp_fast(s[c] - shift));
  return total;
}
}  // namespace attention_avx2

namespace {

// The exp copy for this CPU: the widest the GEMM dispatch chose (so MIXTRAIN_CPU_ISA rules both).
enum class ExpIsa { Generic, Avx2, Avx512 };
ExpIsa exp_isa() {
  static const ExpIsa isa = std::strcmp(gemm_isa(), "avx512") == 0 ? ExpIsa::Avx512
                            : std::strcmp(gemm_isa(), "avx2") == 0  ? ExpIsa::Avx2
                                                                    : ExpIsa::Generic;
  return isa;
}

// s[0, n) = exp(s - shift); returns their sum.
template <class A>
A exp_shifted(A* s, int64_t n, A shift) {
  if constexpr (std::is_same_v<A, float>) {
    if (exp_isa() == ExpIsa::Avx512) return attention_avx512::exp_shifted(s, n, shift);
    if (exp_isa() == ExpIsa::Avx2) return attention_avx2::exp_shifted(s, n, shift);
  }
  A total = 0;
  for (int64_t c = 0; c < n; ++c) total += (s[c] = exp_fast(s[c] - shift));
  return total;
}

template <class A>
A max_of(const A* s, int64_t n, A init) {
  A mx = init;
#pragma omp simd reduction(max : mx)
  for (int64_t c = 0; c < n; ++c) mx = std::max(mx, s[c]);
  return mx;
}

// The causal mask on a [rows, cols] score tile whose first query is i0 and first key j0.
template <class A>
void mask_causal(A* sc, int64_t rows, int64_t cols, int64_t i0, int64_t j0) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = std::max<int64_t>(0, i0 + r - j0 + 1); c < cols; ++c) sc[r * cols + c] = -std::numeric_limits<A>::infinity();
}

// The key tiles [0, end) a query tile starting at i0 with `rows` queries looks at.
int64_t keys_seen(const AttentionShape& sh, int64_t i0, int64_t rows) {
  return sh.causal ? std::min(sh.s, i0 + rows) : sh.s;
}

// The shape's dropout in acc_t<T>: the factor of probability (b, i, j) is `kept` (1 / (1 - p)
// rounded to T, as cpu/random.cpp's dropout scales) or 0, from draw offset + (b * l + i) * s + j.
template <class T>
struct Dropout {
  using A = acc_t<T>;
  explicit Dropout(const AttentionShape& sh)
      : on(sh.dropout_p > 0.0), threshold(static_cast<float>(sh.dropout_p)),
        kept(on ? static_cast<A>(convert<T>(1.0 / (1.0 - sh.dropout_p))) : A(1)), seed(sh.seed), offset(sh.offset),
        l(sh.l), s(sh.s) {}
  A factor(int64_t b, int64_t i, int64_t j) const {
    return dropout_keep(seed, offset + static_cast<uint64_t>((b * l + i) * s + j), threshold) ? kept : A(0);
  }
  bool on;
  float threshold;
  A kept;
  uint64_t seed, offset;
  int64_t l, s;
};

template <class A>
struct ForwardScratch {
  std::vector<A> q, sc, acc, m, sum;
};

template <class T>
void forward_typed(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& sh, const Tensor& out,
                   const Tensor& lse) {
  using A = acc_t<T>;
  Tensor qk, kk, vk;
  const A *pq = acc_values<T>(q, qk), *pk = acc_values<T>(k, kk), *pv = acc_values<T>(v, vk);
  T* po = static_cast<T*>(out.raw_data());
  A* pl = static_cast<A*>(lse.raw_data());
  const int64_t e = sh.e, ev = sh.ev, tiles = (sh.l + kTile - 1) / kTile;
  const A scale = static_cast<A>(sh.scale), inf = std::numeric_limits<A>::infinity();
  const Dropout<T> drop(sh);
  for_items<ForwardScratch<A>>(sh.batch * tiles, [&](int64_t item, ForwardScratch<A>& w) {
    const int64_t b = item / tiles, i0 = item % tiles * kTile, rows = std::min(kTile, sh.l - i0);
    const A* kb = pk + b * sh.s * e;
    const A* vb = pv + b * sh.s * ev;
    w.q.resize(rows * e);
    w.sc.resize(rows * kWideTile);
    w.acc.assign(rows * ev, A(0));
    w.m.assign(rows, -inf);
    w.sum.assign(rows, A(0));
    const A* qrow = pq + (b * sh.l + i0) * e;
    for (int64_t x = 0; x < rows * e; ++x) w.q[x] = qrow[x] * scale;
    const int64_t end = keys_seen(sh, i0, rows);
    for (int64_t j0 = 0; j0 < end; j0 += kWideTile) {
      const int64_t cols = std::min(kWideTile, end - j0);
      A* sc = w.sc.data();
      gemm(rows_of(w.q.data(), rows, e, e), transposed(kb + j0 * e, e, cols, e), sc, cols, false);
      if (sh.causal) mask_causal(sc, rows, cols, i0, j0);
      for (int64_t r = 0; r < rows; ++r) {
        A* s = sc + r * cols;
        const A mx = max_of(s, cols, w.m[r]);
        if (mx == -inf) {  // nothing attended yet (masked tile row): contributes nothing
          std::fill(s, s + cols, A(0));
          continue;
        }
        const A rescale = std::exp(w.m[r] - mx);  // exp(-inf) = 0 on the first tile
        const A total = exp_shifted(s, cols, mx);
        if (drop.on) {  // after the sum: the normaliser is the undropped one
          const int64_t seen = sh.causal ? std::min(cols, i0 + r - j0 + 1) : cols;  // beyond: 0 already
          for (int64_t c = 0; c < seen; ++c) s[c] *= drop.factor(b, i0 + r, j0 + c);
        }
        w.sum[r] = w.sum[r] * rescale + total;
        w.m[r] = mx;
        A* acc = w.acc.data() + r * ev;
        for (int64_t t = 0; t < ev; ++t) acc[t] *= rescale;
      }
      gemm(rows_of(sc, rows, cols, cols), rows_of(vb + j0 * ev, cols, ev, ev), w.acc.data(), ev, true);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const A inv = A(1) / w.sum[r];
      T* o = po + (b * sh.l + i0 + r) * ev;
      for (int64_t t = 0; t < ev; ++t) o[t] = static_cast<T>(w.acc[r * ev + t] * inv);
      pl[b * sh.l + i0 + r] = w.m[r] + std::log(w.sum[r]);
    }
  });
}

template <class A>
struct BackwardScratch {
  std::vector<A> q, dq, d, p, dp, dk, dv;
};

template <class T>
void backward_typed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& grad_out,
                    const Tensor& lse, const AttentionShape& sh, const Tensor& grad_q, const Tensor& grad_k,
                    const Tensor& grad_v) {
  using A = acc_t<T>;
  Tensor qk, kk, vk, ok, gk;
  const A *pq = acc_values<T>(q, qk), *pk = acc_values<T>(k, kk), *pv = acc_values<T>(v, vk);
  const A *po = acc_values<T>(out, ok), *pg = acc_values<T>(grad_out, gk);
  const A* pl = static_cast<const A*>(lse.raw_data());
  T* gq = static_cast<T*>(grad_q.raw_data());
  T* gkey = static_cast<T*>(grad_k.raw_data());
  T* gv = static_cast<T*>(grad_v.raw_data());
  const int64_t l = sh.l, s = sh.s, e = sh.e, ev = sh.ev;
  const A scale = static_cast<A>(sh.scale);
  const Dropout<T> drop(sh);
  for_items<BackwardScratch<A>>(sh.batch, [&](int64_t b, BackwardScratch<A>& w) {
    const A *qb = pq + b * l * e, *kb = pk + b * s * e, *vb = pv + b * s * ev;
    const A *ob = po + b * l * ev, *gb = pg + b * l * ev, *lb = pl + b * l;
    w.q.resize(l * e);
    for (int64_t x = 0; x < l * e; ++x) w.q[x] = qb[x] * scale;
    w.dq.assign(l * e, A(0));
    w.d.resize(l);
    for (int64_t i = 0; i < l; ++i) {
      A dot = 0;
      for (int64_t t = 0; t < ev; ++t) dot += gb[i * ev + t] * ob[i * ev + t];
      w.d[i] = dot;
    }
    w.p.resize(kWideTile * kTile);
    w.dp.resize(kWideTile * kTile);
    for (int64_t j0 = 0; j0 < s; j0 += kTile) {
      const int64_t cols = std::min(kTile, s - j0);
      w.dk.assign(cols * e, A(0));
      w.dv.assign(cols * ev, A(0));
      // Causal: query i sees key j0 only if i >= j0; the first such query tile is j0's.
      for (int64_t i0 = sh.causal ? j0 / kWideTile * kWideTile : 0; i0 < l; i0 += kWideTile) {
        const int64_t rows = std::min(kWideTile, l - i0);
        A *p = w.p.data(), *dp = w.dp.data();
        gemm(rows_of(w.q.data() + i0 * e, rows, e, e), transposed(kb + j0 * e, e, cols, e), p, cols, false);
        if (sh.causal) mask_causal(p, rows, cols, i0, j0);
        for (int64_t r = 0; r < rows; ++r) exp_shifted(p + r * cols, cols, lb[i0 + r]);
        // dP = dO V^T; dS = P (dP - D); dV += P^T dO; dQ' += dS K; dK += dS^T (scale q). With
        // dropout, P's factors M: dS = P (M dP - D), and P becomes P M for dV.
        gemm(rows_of(gb + i0 * ev, rows, ev, ev), transposed(vb + j0 * ev, ev, cols, ev), dp, cols, false);
        if (drop.on) {
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
              const A f = drop.factor(b, i0 + r, j0 + c), pr = p[r * cols + c];
              dp[r * cols + c] = pr * (dp[r * cols + c] * f - w.d[i0 + r]);
              p[r * cols + c] = pr * f;
            }
        } else {
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) dp[r * cols + c] = p[r * cols + c] * (dp[r * cols + c] - w.d[i0 + r]);
        }
        gemm(transposed(p, cols, rows, cols), rows_of(gb + i0 * ev, rows, ev, ev), w.dv.data(), ev, true);
        gemm(rows_of(dp, rows, cols, cols), rows_of(kb + j0 * e, cols, e, e), w.dq.data() + i0 * e, e, true);
        gemm(transposed(dp, cols, rows, cols), rows_of(w.q.data() + i0 * e, rows, e, e), w.dk.data(), e, true);
      }
      T* dkb = gkey + (b * s + j0) * e;
      T* dvb = gv + (b * s + j0) * ev;
      for (int64_t x = 0; x < cols * e; ++x) dkb[x] = static_cast<T>(w.dk[x]);
      for (int64_t x = 0; x < cols * ev; ++x) dvb[x] = static_cast<T>(w.dv[x]);
    }
    T* dqb = gq + b * l * e;
    for (int64_t x = 0; x < l * e; ++x) dqb[x] = static_cast<T>(w.dq[x] * scale);
  });
}

void check_operands(const char* op, std::initializer_list<const Tensor*> ts, DType dt, const AttentionShape& sh) {
  for (const Tensor* t : ts)
    MT_CHECK(t->is_contiguous() && t->dtype() == dt, op, ": expected contiguous ", dtype_name(dt), " operands, got ",
             t->summary());
  MT_CHECK(sh.dropout_p >= 0.0 && sh.dropout_p < 1.0, op, ": dropout probability must be in [0, 1), got ",
           sh.dropout_p);
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& sh, const Tensor& out,
                       const Tensor& lse) {
  check_operands("attention_forward", {&q, &k, &v, &out}, q.dtype(), sh);
  if (sh.batch == 0 || sh.l == 0) return;
  dispatch_floating(q.dtype(), "attention_forward", [&](auto tag) {
    forward_typed<typename decltype(tag)::type>(q, k, v, sh, out, lse);
  });
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& grad_out,
                        const Tensor& lse, const AttentionShape& sh, const Tensor& grad_q, const Tensor& grad_k,
                        const Tensor& grad_v) {
  check_operands("attention_backward", {&q, &k, &v, &out, &grad_out, &grad_q, &grad_k, &grad_v}, q.dtype(), sh);
  if (sh.batch == 0) return;
  dispatch_floating(q.dtype(), "attention_backward", [&](auto tag) {
    backward_typed<typename decltype(tag)::type>(q, k, v, out, grad_out, lse, sh, grad_q, grad_k, grad_v);
  });
}

void register_attention() {
  backends::attention_forward.set(DeviceType::CPU, attention_forward);
  backends::attention_backward.set(DeviceType::CPU, attention_backward);
}

}  // namespace mixtrain::backends::cpu
