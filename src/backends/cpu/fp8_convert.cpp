// Bulk fp8 conversions (fp8_convert.h): a portable loop over base/float8.h's scalar encoders, and
// an AVX-512 copy of the same arithmetic on 16 lanes, chosen at run time.
#include "backends/cpu/fp8_convert.h"

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/gemm_eigen.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/float8.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define MT_FP8_X86 1
#endif

namespace mixtrain::backends::cpu {

namespace {

template <class From>
float widen(From v) {
  if constexpr (std::is_same_v<From, float>) return v;
  else return static_cast<float>(v);
}

template <class From, class F8, bool kScale, bool kStats>
Fp8CastStats encode_portable(const From* src, uint8_t* dst, int64_t n, float scale, bool saturate) {
  Fp8CastStats s;
  for (int64_t i = 0; i < n; ++i) {
    const float x = widen(src[i]);
    const float v = kScale ? x * scale : x;
    if (dst) dst[i] = Float8Traits<F8>::encode(v, saturate);
    if constexpr (kStats) {
      const float ax = std::fabs(x);
      s.amax = ax > s.amax ? ax : s.amax;  // a NaN compares false: ignored
      s.saturated += std::fabs(v) > Float8Traits<F8>::kMax;
    }
  }
  return s;
}

}  // namespace

#if defined(MT_FP8_X86)
// The AVX-512 copy: the scalar encoders' integer steps on 16 lanes, so the bytes are the same. On
// tests/isa/check_isa.sh's list of dispatched copies; called only when gemm_isa() is avx512.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
// GCC 12's intrinsics start some results from _mm512_undefined_*(), which it then reports as
// uninitialized (a false positive fixed in later GCC).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace fp8_avx512 {

template <class From>
inline __m512 load16(const From* p) {
  if constexpr (std::is_same_v<From, float>) {
    return _mm512_loadu_ps(p);
  } else if constexpr (std::is_same_v<From, Half>) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {  // bf16: the high half of an fp32
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
}

inline __m512i c32(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }

// float_to_e4m3fn_bits / float_to_e5m2_bits of base/float8.h, lane by lane.
template <class F8>
inline __m128i encode16(__m512 v, bool saturate) {
  constexpr bool e5 = std::is_same_v<F8, Float8E5M2>;
  const __m512i x = _mm512_castps_si512(v);
  const __m512i sign = _mm512_and_si512(x, c32(0x80000000u));
  const __m512i a = _mm512_xor_si512(x, sign);
  const int shift = e5 ? 21 : 20;
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, e5 ? 21 : 20), c32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(a, c32(e5 ? 0xc80fffffu : 0xc407ffffu)), odd);
  r = _mm512_srl_epi32(r, _mm_cvtsi32_si128(shift));
  const uint32_t anchor = e5 ? 0x43000000u : 0x46800000u;
  const __m512 aligned = _mm512_add_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(c32(anchor)));
  const __m512i sub = _mm512_sub_epi32(_mm512_castps_si512(aligned), c32(anchor));
  r = _mm512_mask_mov_epi32(r, _mm512_cmplt_epu32_mask(a, c32(e5 ? 0x38800000u : 0x3c800000u)), sub);
  r = _mm512_mask_mov_epi32(r, _mm512_cmpge_epu32_mask(a, c32(e5 ? 0x47800000u : 0x43e00000u)), c32(e5 ? 0x7cu : 0x7eu));
  if (e5 && saturate)
    r = _mm512_mask_mov_epi32(
        r, _mm512_cmpgt_epu32_mask(a, c32(0x47600000u)) & _mm512_cmple_epu32_mask(a, c32(0x7f800000u)), c32(0x7bu));
  r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epu32_mask(a, c32(0x7f800000u)), c32(0x7fu));
  r = _mm512_or_si512(_mm512_and_si512(r, c32(0xffu)), _mm512_srli_epi32(sign, 24));
  return _mm512_cvtepi32_epi8(r);
}

template <class From, class F8, bool kScale, bool kStats>
Fp8CastStats encode(const From* src, uint8_t* dst, int64_t n, float scale, bool saturate) {
  const __m512 vscale = _mm512_set1_ps(scale), vmax = _mm512_set1_ps(Float8Traits<F8>::kMax);
  const __m512i abs_mask = c32(0x7fffffffu);
  __m512 amax = _mm512_setzero_ps();
  int64_t saturated = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = load16(src + i);
    const __m512 v = kScale ? _mm512_mul_ps(x, vscale) : x;
    if (dst) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), encode16<F8>(v, saturate));
    if constexpr (kStats) {
      const __m512 ax = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), abs_mask));
      amax = _mm512_max_ps(ax, amax);  // a NaN lane of ax yields amax's lane: ignored, as the scalar loop
      const __m512 av = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), abs_mask));
      saturated += __builtin_popcount(static_cast<unsigned>(_mm512_cmp_ps_mask(av, vmax, _CMP_GT_OQ)));
    }
  }
  Fp8CastStats s = encode_portable<From, F8, kScale, kStats>(src + i, dst ? dst + i : nullptr, n - i, scale, saturate);
  if constexpr (kStats) {
    const float lanes = _mm512_reduce_max_ps(amax);
    s.amax = lanes > s.amax ? lanes : s.amax;
    s.saturated += saturated;
  }
  return s;
}

}  // namespace fp8_avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif
#endif  // MT_FP8_X86

namespace {

std::atomic<int> avx512_override{-1};

bool avx512_possible() {
#if defined(MT_FP8_X86)
  static const bool possible = std::strcmp(gemm_isa(), "avx512") == 0;
  return possible;
#else
  return false;
#endif
}

bool use_avx512() {
  const int mode = avx512_override.load(std::memory_order_relaxed);
  return avx512_possible() && mode != 0;
}

template <class From, class F8>
Fp8CastStats encode_as(const From* src, uint8_t* dst, int64_t n, const float* scale, bool saturate, bool stats) {
  const float s = scale ? *scale : 1.0f;
#if defined(MT_FP8_X86)
  if (use_avx512()) {
    if (scale && stats) return fp8_avx512::encode<From, F8, true, true>(src, dst, n, s, saturate);
    if (scale) return fp8_avx512::encode<From, F8, true, false>(src, dst, n, s, saturate);
    if (stats) return fp8_avx512::encode<From, F8, false, true>(src, dst, n, s, saturate);
    return fp8_avx512::encode<From, F8, false, false>(src, dst, n, s, saturate);
  }
#endif
  if (scale && stats) return encode_portable<From, F8, true, true>(src, dst, n, s, saturate);
  if (scale) return encode_portable<From, F8, true, false>(src, dst, n, s, saturate);
  if (stats) return encode_portable<From, F8, false, true>(src, dst, n, s, saturate);
  return encode_portable<From, F8, false, false>(src, dst, n, s, saturate);
}

template <class From>
Fp8CastStats encode_any(const From* src, uint8_t* dst, int64_t n, DType fp8, const float* scale, bool saturate,
                        bool stats) {
  if (fp8 == kFloat8E4M3FN) return encode_as<From, Float8E4M3FN>(src, dst, n, scale, saturate, stats);
  MT_CHECK(fp8 == kFloat8E5M2, "fp8 cast: ", fp8, " is not an fp8 dtype");
  return encode_as<From, Float8E5M2>(src, dst, n, scale, saturate, stats);
}

// The 256 values of each format in the three wider types, built once.
struct DecodeTables {
  std::array<float, 256> f32[2];
  std::array<uint16_t, 256> bf16[2], f16[2];
  DecodeTables() {
    for (int b = 0; b < 256; ++b) {
      const auto byte = static_cast<uint8_t>(b);
      f32[0][b] = e4m3fn_bits_to_float(byte);
      f32[1][b] = e5m2_bits_to_float(byte);
      for (int k = 0; k < 2; ++k) {
        bf16[k][b] = float_to_bf16_bits(f32[k][b]);
        f16[k][b] = float_to_half_bits(f32[k][b]);
      }
    }
  }
};
const DecodeTables& tables() {
  static const DecodeTables t;
  return t;
}
int format_index(DType fp8) {
  MT_CHECK(is_float8(fp8), "fp8 cast: ", fp8, " is not an fp8 dtype");
  return fp8 == kFloat8E4M3FN ? 0 : 1;
}

}  // namespace

Fp8CastStats to_fp8_array(const float* src, uint8_t* dst, int64_t n, DType fp8, const float* scale, bool saturate,
                          bool stats) {
  return encode_any(src, dst, n, fp8, scale, saturate, stats);
}
Fp8CastStats to_fp8_array(const Half* src, uint8_t* dst, int64_t n, DType fp8, const float* scale, bool saturate,
                          bool stats) {
  return encode_any(src, dst, n, fp8, scale, saturate, stats);
}
Fp8CastStats to_fp8_array(const BFloat16* src, uint8_t* dst, int64_t n, DType fp8, const float* scale, bool saturate,
                          bool stats) {
  return encode_any(src, dst, n, fp8, scale, saturate, stats);
}

void from_fp8_array(const uint8_t* src, float* dst, int64_t n, DType fp8) {
  const float* t = tables().f32[format_index(fp8)].data();
  for (int64_t i = 0; i < n; ++i) dst[i] = t[src[i]];
}
void from_fp8_array(const uint8_t* src, BFloat16* dst, int64_t n, DType fp8) {
  const uint16_t* t = tables().bf16[format_index(fp8)].data();
  for (int64_t i = 0; i < n; ++i) dst[i].bits = t[src[i]];
}
void from_fp8_array(const uint8_t* src, Half* dst, int64_t n, DType fp8) {
  const uint16_t* t = tables().f16[format_index(fp8)].data();
  for (int64_t i = 0; i < n; ++i) dst[i].bits = t[src[i]];
}

bool set_fp8_avx512_override(int mode) {
  avx512_override.store(mode < 0 ? -1 : mode != 0, std::memory_order_relaxed);
  return use_avx512();
}

}  // namespace mixtrain::backends::cpu
