#include "mixtrain/core/half.h"

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace mixtrain {

void half_to_float_array(const Half* in, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  // Half -> float is exact, so the hardware conversion matches the scalar one bit for bit
  // (signalling NaNs aside, which F16C quiets; they are rare enough to take the scalar path).
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m128i exp_all_ones = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7c00)), _mm_set1_epi16(0x7c00));
    if (_mm_movemask_epi8(exp_all_ones) != 0) break;
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = half_bits_to_float(in[i].bits);
}

void float_to_half_array(const float* in, Half* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  // Hardware round-to-nearest-even agrees with the scalar conversion for every non-NaN input;
  // blocks holding a NaN take the scalar path so payloads are handled one way everywhere.
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(in + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (int k = 0; k < 8; ++k) out[i + k].bits = float_to_half_bits(in[i + k]);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
  for (; i < n; ++i) out[i].bits = float_to_half_bits(in[i]);
}

void bf16_to_float_array(const BFloat16* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(in[i].bits);
}

void float_to_bf16_array(const float* in, BFloat16* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i].bits = float_to_bf16_bits(in[i]);
}

}  // namespace mixtrain
