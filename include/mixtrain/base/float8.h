#pragma once
// The two 8-bit float formats of FP8 training, as storage types with their conversions to and
// from fp32, written once for the host and the CUDA device (MT_HOST_DEVICE), so the backends
// agree by construction (docs/REFERENCE_AMP.md, "FP8"):
//   float8_e4m3fn: 4 exponent bits (bias 7), 3 mantissa bits, max 448, NaN (0x7f/0xff), no inf;
//   float8_e5m2:   5 exponent bits (bias 15), 2 mantissa bits, max 57344, inf and NaN.
// From fp32 they round to nearest even as PyTorch's casts do: e4m3fn saturates (anything from 448
// on, inf included, becomes +-448, byte 0x7e), e5m2 overflows to inf. The saturating casts of the
// recipes clamp to +-max first, so e5m2 gives 0x7b for an overflow too. NaN stays NaN (0x7f with
// the sign). To fp32 they are exact; NaN payloads come out as PyTorch's (e4m3fn 0x7ff00000, e5m2
// its fp16 NaN made quiet), the sign kept. fp16, bf16 and fp64 convert through fp32 (exact for
// the first two; fp64 rounds to fp32 first, as in PyTorch).
#include <cstdint>
#include <cstring>

#include "mixtrain/base/host_device.h"

namespace mixtrain {

namespace fp8_detail {
// The bits of one type as another of the same size (memcpy: allowed in device code too).
template <class To, class From>
MT_HOST_DEVICE inline To bit_cast(From v) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs equal sizes");
  To out;
  std::memcpy(&out, &v, sizeof out);
  return out;
}
MT_HOST_DEVICE inline uint32_t bits_of(float f) { return bit_cast<uint32_t>(f); }
MT_HOST_DEVICE inline float float_of(uint32_t u) { return bit_cast<float>(u); }
// A value below the smallest normal of the format, rounded to its subnormal step by the FPU's own
// round-to-nearest-even: added to 2^k, whose fp32 ulp is that step, its low bits are the count.
MT_HOST_DEVICE inline uint8_t subnormal_steps(uint32_t magnitude, uint32_t anchor_bits) {
#ifdef __CUDA_ARCH__
  const float aligned = __fadd_rn(float_of(magnitude), float_of(anchor_bits));
#else
  const float aligned = float_of(magnitude) + float_of(anchor_bits);
#endif
  return static_cast<uint8_t>(bits_of(aligned) - anchor_bits);
}
}  // namespace fp8_detail

// Largest finite values.
constexpr float kFloat8E4M3Max = 448.0f;
constexpr float kFloat8E5M2Max = 57344.0f;

// fp32 -> float8_e4m3fn (always saturating: the format has no infinity).
MT_HOST_DEVICE inline uint8_t float_to_e4m3fn_bits(float f) {
  uint32_t x = fp8_detail::bits_of(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint8_t r;
  if (x >= 0x43e00000u) {          // |f| >= 448, inf or NaN
    r = x > 0x7f800000u ? 0x7f : 0x7e;
  } else if (x < 0x3c800000u) {    // below 2^-6: subnormal steps of 2^-9
    r = fp8_detail::subnormal_steps(x, 0x46800000u);  // 2^14
  } else {                         // rebias the exponent (127 -> 7), round to nearest even at bit 20
    x += 0xc407ffffu + ((x >> 20) & 1u);
    r = static_cast<uint8_t>(x >> 20);
  }
  return static_cast<uint8_t>(r | (sign >> 24));
}

// fp32 -> float8_e5m2: overflow to inf, or with saturate to +-57344 (NaN stays NaN either way).
MT_HOST_DEVICE inline uint8_t float_to_e5m2_bits(float f, bool saturate = false) {
  uint32_t x = fp8_detail::bits_of(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint8_t r;
  if (saturate && x > 0x47600000u && x <= 0x7f800000u) {  // beyond 57344, inf included
    r = 0x7b;
  } else if (x >= 0x47800000u) {  // |f| >= 65536, inf or NaN
    r = x > 0x7f800000u ? 0x7f : 0x7c;
  } else if (x < 0x38800000u) {   // below 2^-14: subnormal steps of 2^-16
    r = fp8_detail::subnormal_steps(x, 0x43000000u);  // 2^7
  } else {                        // rebias (127 -> 15), round to nearest even at bit 21
    x += 0xc80fffffu + ((x >> 21) & 1u);
    r = static_cast<uint8_t>(x >> 21);  // from 61440 on this carries into 0x7c: inf
  }
  return static_cast<uint8_t>(r | (sign >> 24));
}

MT_HOST_DEVICE inline float e4m3fn_bits_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t e = (b >> 3) & 0xfu, m = b & 7u;
  if (e == 0xf && m == 7) return fp8_detail::float_of(sign | 0x7ff00000u);
  if (e == 0) return fp8_detail::float_of(sign | fp8_detail::bits_of(static_cast<float>(m) * 0.001953125f));  // m 2^-9
  return fp8_detail::float_of(sign | ((e + 120u) << 23) | (m << 20));
}

MT_HOST_DEVICE inline float e5m2_bits_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t e = (b >> 2) & 0x1fu, m = b & 3u;
  if (e == 0x1f) return fp8_detail::float_of(sign | 0x7f800000u | (m != 0 ? 0x400000u | (m << 21) : 0u));
  if (e == 0) return fp8_detail::float_of(sign | fp8_detail::bits_of(static_cast<float>(m) * 1.52587890625e-05f));  // m 2^-16
  return fp8_detail::float_of(sign | ((e + 112u) << 23) | (m << 21));
}

struct Float8E4M3FN {
  uint8_t bits;
  Float8E4M3FN() = default;
  MT_HOST_DEVICE Float8E4M3FN(float f) : bits(float_to_e4m3fn_bits(f)) {}  // NOLINT: as a built-in float type
  MT_HOST_DEVICE operator float() const { return e4m3fn_bits_to_float(bits); }
  MT_HOST_DEVICE static Float8E4M3FN from_bits(uint8_t b) {
    Float8E4M3FN v;
    v.bits = b;
    return v;
  }
};

struct Float8E5M2 {
  uint8_t bits;
  Float8E5M2() = default;
  MT_HOST_DEVICE Float8E5M2(float f) : bits(float_to_e5m2_bits(f)) {}  // NOLINT
  MT_HOST_DEVICE operator float() const { return e5m2_bits_to_float(bits); }
  MT_HOST_DEVICE static Float8E5M2 from_bits(uint8_t b) {
    Float8E5M2 v;
    v.bits = b;
    return v;
  }
};

static_assert(sizeof(Float8E4M3FN) == 1 && sizeof(Float8E5M2) == 1, "fp8 types must be 1 byte");

// Per-format constants and the encoder, for code templated on the storage type.
template <class F8>
struct Float8Traits;
template <>
struct Float8Traits<Float8E4M3FN> {
  static constexpr float kMax = kFloat8E4M3Max;
  MT_HOST_DEVICE static uint8_t encode(float f, bool /*saturate: always*/) { return float_to_e4m3fn_bits(f); }
};
template <>
struct Float8Traits<Float8E5M2> {
  static constexpr float kMax = kFloat8E5M2Max;
  MT_HOST_DEVICE static uint8_t encode(float f, bool saturate) { return float_to_e5m2_bits(f, saturate); }
};

}  // namespace mixtrain
