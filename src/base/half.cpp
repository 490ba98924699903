#include "mixtrain/base/half.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "base/cpu_features.h"
#define MT_X86 1
#endif

namespace mixtrain {

#if defined(MT_X86)
namespace {

// The F16C loops, compiled for F16C whatever the build's -march; called only where the CPU has it
// (checked once at run time), so a portable build converts as fast as a -march=native one.
__attribute__((target("avx,f16c"))) int64_t half_to_float_f16c(const Half* in, float* out, int64_t n) {
  // Half -> float is exact, so the hardware conversion matches the scalar one bit for bit
  // (signalling NaNs aside, which F16C quiets; they are rare enough to take the scalar path).
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m128i exp_all_ones = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7c00)), _mm_set1_epi16(0x7c00));
    if (_mm_movemask_epi8(exp_all_ones) != 0) break;
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  return i;
}

__attribute__((target("avx,f16c"))) int64_t float_to_half_f16c(const float* in, Half* out, int64_t n) {
  // Hardware round-to-nearest-even agrees with the scalar conversion for every non-NaN input;
  // blocks holding a NaN take the scalar path so payloads are handled one way everywhere.
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(in + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (int k = 0; k < 8; ++k) out[i + k].bits = float_to_half_bits_portable(in[i + k]);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}

bool cpu_has_f16c() {
#if defined(__F16C__)
  return true;
#else
  static const bool has = __builtin_cpu_supports("avx") && detail::cpu_has_f16c();
  return has;
#endif
}

}  // namespace
#endif

void half_to_float_array(const Half* in, float* out, int64_t n) {
  int64_t i = 0;
#if defined(MT_X86)
  if (cpu_has_f16c()) i = half_to_float_f16c(in, out, n);
#endif
  for (; i < n; ++i) out[i] = half_bits_to_float(in[i].bits);
}

void float_to_half_array(const float* in, Half* out, int64_t n) {
  int64_t i = 0;
#if defined(MT_X86)
  if (cpu_has_f16c()) i = float_to_half_f16c(in, out, n);
#endif
  for (; i < n; ++i) out[i].bits = float_to_half_bits(in[i]);
}

// Plain loops the compiler vectorizes; also compiled for AVX2, picked at load time where the CPU
// has it (integer work only, so both clones give the same bits). Not under ThreadSanitizer: the
// clones' ifunc resolvers run during relocation, before its runtime is up, and crash.
#if defined(MT_X86) && !defined(__AVX2__) && !defined(__SANITIZE_THREAD__)
#define MT_CLONES_AVX2 __attribute__((target_clones("avx2", "default")))
#else
#define MT_CLONES_AVX2
#endif

MT_CLONES_AVX2 void bf16_to_float_array(const BFloat16* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(in[i].bits);
}

MT_CLONES_AVX2 void float_to_bf16_array(const float* in, BFloat16* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i].bits = float_to_bf16_bits(in[i]);
}

}  // namespace mixtrain
