#pragma once
// Bulk conversions between fp32/fp16/bf16 and the fp8 formats on contiguous arrays, one thread's
// share (callers split the work). To fp8: x * scale (when a scale is given) rounded by
// base/float8.h's encoders, saturated or not, and in the same pass the amax (max |x| before the
// scale, NaN ignored) and the count of values beyond the format's max (|x * scale| > max, inf
// included, NaN not). An AVX-512 copy is chosen at run time with the GEMM's (MIXTRAIN_CPU_ISA caps
// both); its results are the scalar code's bit for bit (tests/backends/test_cpu_fp8.cpp).
// From fp8: table lookups, exact.
#include <cstdint>

#include "mixtrain/base/dtype.h"
#include "mixtrain/base/half.h"

namespace mixtrain::backends::cpu {

struct Fp8CastStats {
  float amax = 0.0f;       // max |x| (NaN ignored)
  int64_t saturated = 0;   // |x * scale| > max
};

// dst may be null (statistics only). fp8 is kFloat8E4M3FN or kFloat8E5M2; scale null: none.
// saturate matters for e5m2 only (e4m3fn always saturates).
Fp8CastStats to_fp8_array(const float* src, uint8_t* dst, int64_t n, DType fp8, const float* scale, bool saturate,
                          bool stats);
Fp8CastStats to_fp8_array(const Half* src, uint8_t* dst, int64_t n, DType fp8, const float* scale, bool saturate,
                          bool stats);
Fp8CastStats to_fp8_array(const BFloat16* src, uint8_t* dst, int64_t n, DType fp8, const float* scale, bool saturate,
                          bool stats);

void from_fp8_array(const uint8_t* src, float* dst, int64_t n, DType fp8);
void from_fp8_array(const uint8_t* src, BFloat16* dst, int64_t n, DType fp8);
void from_fp8_array(const uint8_t* src, Half* dst, int64_t n, DType fp8);

// Forces the portable loops (0), the AVX-512 ones where the CPU has them (1), or the default (-1);
// for tests. Returns whether the AVX-512 copy is in use after the call.
bool set_fp8_avx512_override(int mode);

}  // namespace mixtrain::backends::cpu
