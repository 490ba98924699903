// The bf16 matrix product on vdpbf16ps (gemm_bf16.h), compiled with AVX-512 and AVX512_BF16
// flags. Include nothing of mixtrain's here but the plain-type headers, and no standard template
// that could be instantiated out of line: the linker could pick an AVX-512 copy of it for every
// caller (tests/isa/check_isa.sh). Everything local has internal linkage.
//
// Both operands are packed into the layout the instruction wants: a 32-bit word holds the bf16
// pair (k, k+1) of one row of A or one column of B. B becomes panels of 32 columns, [k pair][32
// words], two zmm loads per pair; A becomes tiles of 8 rows, [k pair][8 words], each word
// broadcast. The microkernel keeps an 8 x 32 fp32 tile in 16 accumulators over the whole depth:
// the B panel (64 bytes per pair) streams from L1/L2 at a fraction of the load ports' rate, so no
// further K blocking pays. Each output tile is summed by one thread in a fixed order, so results
// do not depend on the thread count.
#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cpu/gemm_bf16.h"
#include "backends/cpu/thread_pool.h"

namespace mixtrain::backends::cpu::gemm_avx512bf16 {

namespace {

constexpr int kMr = 8;   // rows of a tile
constexpr int kNr = 32;  // columns of a tile (two zmm of fp32)

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Part `part` of `parts` of [0, count): [begin, end).
void share(int64_t count, int part, int parts, int64_t& begin, int64_t& end) {
  begin = count * part / parts;
  end = count * (part + 1) / parts;
}

uint32_t to_bits(uint16_t v) { return v; }
uint32_t to_bits(float f) {  // the high half: exact for widened bf16 values (gemm_bf16.h)
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u >> 16;
}

template <class S>
uint32_t element(const GemmMatrix<S>& m, int64_t r, int64_t c) {
  return to_bits(m.data[r * m.row_stride + c * m.col_stride]);
}

// A thread's packing buffers, kept between calls: a fresh allocation of this size comes from
// mmap, and its page faults cost more than the packing (64-byte aligned).
struct Scratch {
  uint32_t* p = nullptr;
  int64_t words = 0;
  uint32_t* get(int64_t n) {
    if (n > words) {
      std::free(p);
      p = nullptr;
      words = 0;
      p = static_cast<uint32_t*>(std::aligned_alloc(64, static_cast<size_t>(cdiv(n * 4, 64) * 64)));
      if (p == nullptr) throw std::bad_alloc();
      words = n;
    }
    return p;
  }
  ~Scratch() { std::free(p); }
};
thread_local Scratch a_scratch, b_scratch;

// Columns [c0, c0 + 32) of B (k rows) as [kp][32] pair words; columns past the end are zeros.
template <class S>
void pack_b_panel(const GemmMatrix<S>& b, int64_t c0, int64_t kp, uint32_t* dst) {
  const int64_t k = b.rows, nc = b.cols - c0 < kNr ? b.cols - c0 : kNr;
  if (nc < kNr)  // only the padding: the rest is written below
    for (int64_t p = 0; p < kp; ++p) std::memset(dst + p * kNr + nc, 0, static_cast<size_t>(kNr - nc) * 4);
  if (b.col_stride == 1) {  // row-major: two rows at a time, unit stride so the loop vectorizes
    for (int64_t p = 0; p < kp; ++p) {
      uint32_t* out = dst + p * kNr;
      const S* lo = b.data + 2 * p * b.row_stride + c0;
      if (2 * p + 1 < k) {
        const S* hi = lo + b.row_stride;
        for (int64_t c = 0; c < nc; ++c) out[c] = to_bits(lo[c]) | to_bits(hi[c]) << 16;
      } else {
        for (int64_t c = 0; c < nc; ++c) out[c] = to_bits(lo[c]);
      }
    }
  } else if (b.row_stride == 1) {  // column-major: each column's pairs are adjacent
    for (int64_t c = 0; c < nc; ++c) {
      const S* col = b.data + (c0 + c) * b.col_stride;
      for (int64_t p = 0; p < k / 2; ++p) dst[p * kNr + c] = to_bits(col[2 * p]) | to_bits(col[2 * p + 1]) << 16;
      if (k % 2) dst[(kp - 1) * kNr + c] = to_bits(col[k - 1]);
    }
  } else {  // a single row or column with other strides
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t p = 0; p < kp; ++p) {
        const bool pair = 2 * p + 1 < k;
        dst[p * kNr + c] = element(b, 2 * p, c0 + c) | (pair ? element(b, 2 * p + 1, c0 + c) << 16 : 0u);
      }
  }
}

// Rows [r0, r0 + 8) of A (k columns) as [kp][8] pair words; rows past the end are zeros.
template <class S>
void pack_a_tile(const GemmMatrix<S>& a, int64_t r0, int64_t kp, uint32_t* dst) {
  const int64_t k = a.cols, nr = a.rows - r0 < kMr ? a.rows - r0 : kMr;
  if (nr < kMr)
    for (int64_t p = 0; p < kp; ++p) std::memset(dst + p * kMr + nr, 0, static_cast<size_t>(kMr - nr) * 4);
  if (a.col_stride == 1) {  // row-major: each row's pairs are adjacent
    for (int64_t r = 0; r < nr; ++r) {
      const S* row = a.data + (r0 + r) * a.row_stride;
      for (int64_t p = 0; p < k / 2; ++p) dst[p * kMr + r] = to_bits(row[2 * p]) | to_bits(row[2 * p + 1]) << 16;
      if (k % 2) dst[(kp - 1) * kMr + r] = to_bits(row[k - 1]);
    }
  } else if (a.row_stride == 1) {  // column-major: two columns at a time
    for (int64_t p = 0; p < kp; ++p) {
      const S* lo = a.data + 2 * p * a.col_stride + r0;
      if (2 * p + 1 < k) {
        const S* hi = lo + a.col_stride;
        for (int64_t r = 0; r < nr; ++r) dst[p * kMr + r] = to_bits(lo[r]) | to_bits(hi[r]) << 16;
      } else {
        for (int64_t r = 0; r < nr; ++r) dst[p * kMr + r] = to_bits(lo[r]);
      }
    }
  } else {  // a single row or column with other strides
    for (int64_t p = 0; p < kp; ++p) {
      const bool pair = 2 * p + 1 < k;
      for (int64_t r = 0; r < nr; ++r)
        dst[p * kMr + r] = element(a, r0 + r, 2 * p) | (pair ? element(a, r0 + r, 2 * p + 1) << 16 : 0u);
    }
  }
}

__m512bh as_bh(__m512i v) { return (__m512bh)v; }

// One 8 x 32 tile over kp pairs, stored (or added) into out's first `rows` rows and the columns
// the masks keep.
void tile(const uint32_t* ap, const uint32_t* bp, int64_t kp, float* out, int64_t ldc, int64_t rows, __mmask16 m0,
          __mmask16 m1, bool accumulate) {
  __m512 acc[kMr][2];
  for (int r = 0; r < kMr; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = as_bh(_mm512_load_si512(bp + p * kNr));
    const __m512bh b1 = as_bh(_mm512_load_si512(bp + p * kNr + 16));
    const uint32_t* a = ap + p * kMr;
#pragma GCC unroll 8
    for (int r = 0; r < kMr; ++r) {
      const __m512bh av = as_bh(_mm512_set1_epi32(static_cast<int>(a[r])));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
    }
  }
  for (int r = 0; r < kMr && r < rows; ++r) {
    float* o = out + r * ldc;
    __m512 v0 = acc[r][0], v1 = acc[r][1];
    if (accumulate) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, o));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, o + 16));
    }
    _mm512_mask_storeu_ps(o, m0, v0);
    _mm512_mask_storeu_ps(o + 16, m1, v1);
  }
}

__mmask16 mask_of(int64_t valid) { return valid >= 16 ? __mmask16(0xffff) : __mmask16((1u << (valid > 0 ? valid : 0)) - 1u); }

template <class S>
void product(const GemmBf16Call<S>& c) {
  const int64_t m = c.a.rows, n = c.b.cols, k = c.a.cols;
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!c.accumulate)
      for (int64_t r = 0; r < m; ++r) std::memset(c.out + r * c.ldc, 0, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const int64_t kp = cdiv(k, 2), panels = cdiv(n, kNr), tiles = cdiv(m, kMr);
  uint32_t* const bpack = b_scratch.get(panels * kp * kNr);
  uint32_t* const apack = a_scratch.get(tiles * kp * kMr);
  // Small products stay on the calling thread: a region costs more than they take. Larger ones
  // pack and multiply in three regions on the backend's worker threads (thread_pool.h).
  const int threads = m * n * k >= (int64_t(1) << 18) ? region_threads() : 1;
  struct Job {
    const GemmBf16Call<S>& c;
    int64_t m, n, kp, panels, tiles;
    uint32_t *apack, *bpack;
  } job{c, m, n, kp, panels, tiles, apack, bpack};
  const RegionPartFn pack_b = [](void* ctx, int part, int parts) {
    const Job& j = *static_cast<const Job*>(ctx);
    int64_t b, e;
    share(j.panels, part, parts, b, e);
    for (int64_t p = b; p < e; ++p) pack_b_panel(j.c.b, p * kNr, j.kp, j.bpack + p * j.kp * kNr);
  };
  const RegionPartFn pack_a = [](void* ctx, int part, int parts) {
    const Job& j = *static_cast<const Job*>(ctx);
    int64_t b, e;
    share(j.tiles, part, parts, b, e);
    for (int64_t i = b; i < e; ++i) pack_a_tile(j.c.a, i * kMr, j.kp, j.apack + i * j.kp * kMr);
  };
  // Panel-major: a thread's consecutive tiles share a B panel.
  const RegionPartFn multiply = [](void* ctx, int part, int parts) {
    const Job& j = *static_cast<const Job*>(ctx);
    int64_t b, e;
    share(j.panels * j.tiles, part, parts, b, e);
    for (int64_t t = b; t < e; ++t) {
      const int64_t p = t / j.tiles, i = t % j.tiles;
      const int64_t cols = j.n - p * kNr;
      tile(j.apack + i * j.kp * kMr, j.bpack + p * j.kp * kNr, j.kp, j.c.out + i * kMr * j.c.ldc + p * kNr, j.c.ldc,
           j.m - i * kMr, mask_of(cols), mask_of(cols - 16), j.c.accumulate);
    }
  };
  const RegionPartFn steps[] = {pack_b, pack_a, multiply};
  for (RegionPartFn step : steps) {
    if (threads > 1) run_region(threads, threads, step, &job);
    else step(&job, 0, 1);
  }
}

}  // namespace

void gemm_product(const GemmBf16Call<uint16_t>& call) { product(call); }
void gemm_product(const GemmBf16Call<float>& call) { product(call); }

}  // namespace mixtrain::backends::cpu::gemm_avx512bf16
