#pragma once
// IEEE binary16 (fp16) and bfloat16 storage types with bit-exact round-to-nearest-even
// conversions from fp32. Inline because every CPU kernel converts element by element.
//
// NaN: sign and the top payload bits are kept; a NaN whose kept payload would be zero gets the
// quiet bit, so it stays a NaN. A half -> float -> half round trip is the identity on all
// 65,536 bit patterns, signalling NaNs included.
#include <cstdint>
#include <cstring>

// Host code built with F16C converts one element in one instruction (vcvtph2ps / vcvtps2ph),
// which gives the same bits as the portable code below for every input but NaNs; NaNs take the
// portable path, so payloads are handled one way everywhere. (Not in nvcc's compilations: its
// device code has its own half types.)
#if defined(__F16C__) && !defined(__CUDACC__)
#define MT_HOST_F16C 1
#include <immintrin.h>
#endif

namespace mixtrain {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The portable conversions; half_bits_to_float and float_to_half_bits below use F16C where built.
inline float half_bits_to_float_portable(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return bits_float(sign | float_bits(magnitude));
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t float_to_half_bits_portable(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    if (ax == 0x7f800000u) return sign | 0x7c00u;
    uint16_t payload = static_cast<uint16_t>((ax >> 13) & 0x3ffu);
    if (payload == 0) payload = 0x200u;
    return sign | 0x7c00u | payload;
  }
  if (ax >= 0x47800000u) return sign | 0x7c00u;  // >= 65536: overflows to inf
  if (ax < 0x38800000u) {
    // Result is subnormal or zero: adding 0.5f aligns the value so that the FPU's own
    // round-to-nearest-even produces the half mantissa in the low bits.
    const float aligned = bits_float(ax) + 0.5f;
    return sign | static_cast<uint16_t>(float_bits(aligned) - 0x3f000000u);
  }
  const uint32_t odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + odd;  // rebias exponent by -112 and round to nearest even
  return sign | static_cast<uint16_t>(ax >> 13);
}

inline float half_bits_to_float(uint16_t h) {
#ifdef MT_HOST_F16C
  if ((h & 0x7c00u) != 0x7c00u) return _cvtsh_ss(h);  // finite: exact
#endif
  return half_bits_to_float_portable(h);
}

inline uint16_t float_to_half_bits(float f) {
#ifdef MT_HOST_F16C
  if (f == f) return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));  // not NaN
#endif
  return float_to_half_bits_portable(f);
}

inline float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Selects rather than a NaN branch, so loops over it vectorize.
inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t rounded = static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  const uint16_t hi = static_cast<uint16_t>(x >> 16);
  const uint16_t nan = (hi & 0x7fu) == 0 ? static_cast<uint16_t>(hi | 0x40u) : hi;  // stays a NaN
  return (x & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
}

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(float_to_half_bits(f)) {}  // NOLINT: implicit like a built-in float type
  operator float() const { return half_bits_to_float(bits); }
  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(float_to_bf16_bits(f)) {}  // NOLINT
  operator float() const { return bf16_bits_to_float(bits); }
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "half types must be 2 bytes");

// Bulk conversions (vectorized with F16C where the build enables it).
void half_to_float_array(const Half* in, float* out, int64_t n);
void float_to_half_array(const float* in, Half* out, int64_t n);
void bf16_to_float_array(const BFloat16* in, float* out, int64_t n);
void float_to_bf16_array(const float* in, BFloat16* out, int64_t n);

// The same, by argument types, for templated kernels.
inline void convert_array(const Half* in, float* out, int64_t n) { half_to_float_array(in, out, n); }
inline void convert_array(const float* in, Half* out, int64_t n) { float_to_half_array(in, out, n); }
inline void convert_array(const BFloat16* in, float* out, int64_t n) { bf16_to_float_array(in, out, n); }
inline void convert_array(const float* in, BFloat16* out, int64_t n) { float_to_bf16_array(in, out, n); }

}  // namespace mixtrain
