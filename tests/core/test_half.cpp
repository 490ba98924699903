// fp16 / bf16 conversion tests (docs/TESTING.md, "Rounding"): exhaustive over all 16-bit
// patterns, and float -> half / bf16 against references written here in double arithmetic
// (no bit tricks shared with half.h), against F16C where the build has it, and bulk vs scalar.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "mixtrain/base/half.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define MT_HALF_SLOW 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(thread_sanitizer)
#define MT_HALF_SLOW 1
#endif
#endif
#if !defined(MT_HALF_SLOW) && !defined(__OPTIMIZE__)
#define MT_HALF_SLOW 1  // unoptimized build
#endif

namespace mixtrain {
namespace {

#ifdef MT_HALF_SLOW
constexpr int64_t kRandomCount = 2'000'000;
#else
constexpr int64_t kRandomCount = 20'000'000;
#endif

// ---- independent references --------------------------------------------------------------

uint32_t bits_of(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float float_of(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// Value of an fp16 pattern as a double: (-1)^s * 2^(e-15) * (1 + m/1024), subnormal m * 2^-24.
double ref_half_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) v = std::ldexp(m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

// Same for bf16: 8 exponent bits (bias 127), 7 mantissa bits, subnormal m * 2^-133.
double ref_bf16_value(uint16_t b) {
  const int s = b >> 15, e = (b >> 7) & 255, m = b & 127;
  double v;
  if (e == 0) v = std::ldexp(m, -133);
  else if (e == 255) v = m ? NAN : INFINITY;
  else v = std::ldexp(128 + m, e - 134);
  return s ? -v : v;
}

// Round |a| (finite, below the overflow threshold) onto the grid of a format with `mbits` stored
// mantissa bits, exponent bias `bias`: the two neighbours are k*q and (k+1)*q; pick the nearer,
// ties to the even k. Returns the magnitude bit pattern (an overflow of the mantissa carries into
// the exponent field, and a subnormal rounding up to the smallest normal gives its pattern).
uint32_t ref_round_magnitude(double a, int mbits, int bias) {
  const int min_exp = 1 - bias;  // exponent of the smallest normal
  double q;
  int field;
  if (a < std::ldexp(1.0, min_exp)) {
    q = std::ldexp(1.0, min_exp - mbits);
    field = 0;
  } else {
    int ex;
    std::frexp(a, &ex);  // a in [2^(ex-1), 2^ex)
    q = std::ldexp(1.0, ex - 1 - mbits);
    field = ex - 1 + bias;
  }
  const double scaled = a / q;  // exact: power-of-two scaling of a 24-bit value
  double k = std::floor(scaled);
  const double rem = scaled - k;
  if (rem > 0.5 || (rem == 0.5 && std::fmod(k, 2.0) == 1.0)) k += 1.0;
  const uint32_t m = static_cast<uint32_t>(k);
  if (field == 0) return m;
  return (static_cast<uint32_t>(field) << mbits) + m - (1u << mbits);
}

uint16_t ref_float_to_half(float f) {
  const uint32_t u = bits_of(f);
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) {  // documented: keep sign + top 10 payload bits, quiet bit if they are 0
    const uint16_t payload = (u >> 13) & 0x3ff;
    return sign | 0x7c00 | (payload ? payload : 0x200);
  }
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;  // 65504 + half an ulp (tie goes to the even "inf")
  return sign | static_cast<uint16_t>(ref_round_magnitude(a, 10, 15));
}

uint16_t ref_float_to_bf16(float f) {
  const uint32_t u = bits_of(f);
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) {
    const uint16_t payload = (u >> 16) & 0x7f;
    return sign | 0x7f80 | (payload ? payload : 0x40);
  }
  const double a = std::fabs(static_cast<double>(f));
  if (a >= std::ldexp(511.0, 119)) return sign | 0x7f80;  // (2 - 2^-8) * 2^127
  return sign | static_cast<uint16_t>(ref_round_magnitude(a, 7, 127));
}

// ---- mismatch reporting ------------------------------------------------------------------

struct Mismatches {
  const char* what;
  int64_t count = 0;
  explicit Mismatches(const char* w) : what(w) {}
  void check(uint32_t in, uint32_t got, uint32_t want) {
    if (got == want) return;
    if (++count <= 8)
      ADD_FAILURE() << what << ": input 0x" << std::hex << in << " got 0x" << got << " expected 0x" << want;
  }
  ~Mismatches() { EXPECT_EQ(count, 0) << what << ": total mismatches"; }
};

struct Rng {  // splitmix64
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint32_t u32() { return static_cast<uint32_t>(next() >> 32); }
};

// Expected fp32 bits of decoding `v` (reference value); for NaN the documented payload rule.
uint32_t expect_decoded(double v, uint32_t nan_bits) {
  return std::isnan(v) ? nan_bits : bits_of(static_cast<float>(v));
}

// ---- 1. exhaustive over the 16-bit patterns ----------------------------------------------

TEST(Half, AllPatternsDecodeAndRoundTrip) {
  Mismatches decode("half_bits_to_float vs ldexp reference"), trip("half->float->half");
  Mismatches cls("Half class round trip");
  Mismatches portable_decode("half_bits_to_float_portable vs ldexp reference"),
      portable_trip("portable half->float->half");
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_bits_to_float(static_cast<uint16_t>(h));
    const uint32_t nan_bits = ((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13);
    const uint32_t want = expect_decoded(ref_half_value(static_cast<uint16_t>(h)), nan_bits);
    decode.check(h, bits_of(f), want);
    trip.check(h, float_to_half_bits(f), h);
    // The portable code, which builds without F16C use for every value (and this one for NaNs).
    const float pf = half_bits_to_float_portable(static_cast<uint16_t>(h));
    portable_decode.check(h, bits_of(pf), want);
    portable_trip.check(h, float_to_half_bits_portable(pf), h);
    cls.check(h, Half(static_cast<float>(Half::from_bits(static_cast<uint16_t>(h)))).bits, h);
  }
}

TEST(BFloat16, AllPatternsDecodeAndRoundTrip) {
  Mismatches decode("bf16_bits_to_float vs ldexp reference"), trip("bf16->float->bf16");
  Mismatches cls("BFloat16 class round trip");
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_bits_to_float(static_cast<uint16_t>(b));
    decode.check(b, bits_of(f), expect_decoded(ref_bf16_value(static_cast<uint16_t>(b)), b << 16));
    trip.check(b, float_to_bf16_bits(f), b);
    cls.check(b, BFloat16(static_cast<float>(BFloat16::from_bits(static_cast<uint16_t>(b)))).bits, b);
  }
}

// ---- 2. float -> half / bf16 against the reference ---------------------------------------

TEST(Half, RandomFloatsMatchReference) {
  Mismatches mm("float_to_half_bits (random) vs reference");
  Mismatches portable("float_to_half_bits_portable (random) vs reference");
  Rng rng(0x5eed1234);
  for (int64_t i = 0; i < kRandomCount; ++i) {
    uint32_t u = rng.u32();
    // Every other input: keep sign and mantissa, force the exponent into [100, 146] so most
    // inputs land in or next to the fp16 range (subnormals, normals, overflow).
    if (i & 1) u = (u & 0x807fffffu) | ((100u + (u >> 23 & 0xff) % 47u) << 23);
    const float f = float_of(u);
    mm.check(u, float_to_half_bits(f), ref_float_to_half(f));
    portable.check(u, float_to_half_bits_portable(f), ref_float_to_half(f));
  }
}

TEST(BFloat16, RandomFloatsMatchReference) {
  Mismatches mm("float_to_bf16_bits (random) vs reference");
  Rng rng(0xbf16bf16);
  for (int64_t i = 0; i < kRandomCount; ++i) {
    const uint32_t u = rng.u32();
    const float f = float_of(u);
    mm.check(u, float_to_bf16_bits(f), ref_float_to_bf16(f));
  }
}

// Every fp32 value of the binades at the fp16 boundaries (both signs): around 2^-25 / 2^-24
// (smallest subnormal), 2^-15 / 2^-14 (largest subnormal / smallest normal), 2^15 / 2^16
// (largest finite, overflow). Plus, for every binade 2^-30 .. 2^17, all top-10-bit mantissas
// combined with low bits that sit exactly on, just above and just below the rounding points.
TEST(Half, BoundaryBinadesMatchReference) {
  Mismatches mm("float_to_half_bits (boundary binades) vs reference");
  Mismatches portable("float_to_half_bits_portable (boundary binades) vs reference");
#ifdef MT_HALF_SLOW
  const uint32_t step = 61;  // a prime stride keeps it quick under sanitizers
#else
  const uint32_t step = 1;
#endif
  for (uint32_t exp : {102u, 103u, 112u, 113u, 142u, 143u})
    for (uint32_t sign : {0u, 0x80000000u})
      for (uint32_t m = 0; m < (1u << 23); m += step) {
        const uint32_t u = sign | (exp << 23) | m;
        mm.check(u, float_to_half_bits(float_of(u)), ref_float_to_half(float_of(u)));
        portable.check(u, float_to_half_bits_portable(float_of(u)), ref_float_to_half(float_of(u)));
      }
  const uint32_t lows[] = {0, 1, 2, 0x7ff, 0x800, 0x801, 0xfff, 0x1000, 0x1001, 0x1ffe, 0x1fff};
  for (uint32_t exp = 97; exp <= 144; ++exp)
    for (uint32_t sign : {0u, 0x80000000u})
      for (uint32_t top = 0; top < 1024; ++top)
        for (uint32_t low : lows) {
          const uint32_t u = sign | (exp << 23) | (top << 13) | low;
          mm.check(u, float_to_half_bits(float_of(u)), ref_float_to_half(float_of(u)));
          portable.check(u, float_to_half_bits_portable(float_of(u)), ref_float_to_half(float_of(u)));
        }
}

// bf16 has the fp32 exponent range, so walk every binade with all top-7 mantissa bits and the
// low-16-bit patterns around the rounding point; exhaust the top binade (overflow) and the
// fp32 subnormals' first binade.
TEST(BFloat16, BoundaryBinadesMatchReference) {
  Mismatches mm("float_to_bf16_bits (boundary binades) vs reference");
  const uint32_t lows[] = {0, 1, 0x7ffe, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff};
  for (uint32_t exp = 0; exp < 256; ++exp)
    for (uint32_t sign : {0u, 0x80000000u})
      for (uint32_t top = 0; top < 128; ++top)
        for (uint32_t low : lows) {
          const uint32_t u = sign | (exp << 23) | (top << 16) | low;
          mm.check(u, float_to_bf16_bits(float_of(u)), ref_float_to_bf16(float_of(u)));
        }
  for (uint32_t exp : {0u, 1u, 254u})
    for (uint32_t m = 0; m < (1u << 23); m += 7) {
      const uint32_t u = (exp << 23) | m;
      mm.check(u, float_to_bf16_bits(float_of(u)), ref_float_to_bf16(float_of(u)));
    }
}

// Hand-written expected bits, checked against both the implementation and the reference.
TEST(Half, HardCases) {
  struct Case { float in; uint16_t want; };
  const float sub = std::ldexp(1.0f, -24);  // smallest subnormal
  const Case cases[] = {
      {65504.0f, 0x7bff}, {65519.99f, 0x7bff}, {std::nextafter(65520.0f, 0.0f), 0x7bff},
      {65520.0f, 0x7c00}, {std::nextafter(65520.0f, 1e9f), 0x7c00}, {65536.0f, 0x7c00},
      {-65520.0f, 0xfc00}, {-65504.0f, 0xfbff}, {3.4028235e38f, 0x7c00}, {1e10f, 0x7c00},
      {1023 * sub, 0x03ff}, {1023.5f * sub, 0x0400}, {std::nextafter(1023.5f * sub, 0.0f), 0x03ff},
      {std::ldexp(1.0f, -14), 0x0400}, {sub, 0x0001}, {-sub, 0x8001},
      {sub / 2, 0x0000}, {-sub / 2, 0x8000}, {std::nextafter(sub / 2, 1.0f), 0x0001},
      {std::nextafter(sub / 2, 0.0f), 0x0000}, {1.5f * sub, 0x0002}, {2.5f * sub, 0x0002},
      {3.5f * sub, 0x0004}, {1e-45f, 0x0000}, {-1e-45f, 0x8000}, {0.0f, 0x0000}, {-0.0f, 0x8000},
      {1.0f, 0x3c00}, {1.0f + std::ldexp(1.0f, -11), 0x3c00},  // tie, even neighbour below
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3c02},              // tie, odd neighbour below
      {1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -23), 0x3c01},
      {2049.0f, 0x6800}, {2051.0f, 0x6802}, {-2051.0f, 0xe802}, {0.1f, 0x2e66}, {-2.0f, 0xc000},
      {INFINITY, 0x7c00}, {-INFINITY, 0xfc00},
      {float_of(0x7fc00000), 0x7e00}, {float_of(0xffc00000), 0xfe00},   // quiet NaNs
      {float_of(0x7f800001), 0x7e00}, {float_of(0xff800001), 0xfe00},   // sNaN, payload lost
      {float_of(0x7fa00000), 0x7d00}, {float_of(0xff802000), 0xfc01},   // sNaN, payload kept
      {float_of(0x7fffffff), 0x7fff}, {float_of(0x7fc02000), 0x7e01},
  };
  Mismatches impl("float_to_half_bits (hard cases)"), ref("reference (hard cases)");
  for (const Case& c : cases) {
    impl.check(bits_of(c.in), float_to_half_bits(c.in), c.want);
    ref.check(bits_of(c.in), ref_float_to_half(c.in), c.want);
    impl.check(bits_of(c.in), Half(c.in).bits, c.want);
    impl.check(bits_of(c.in), float_to_half_bits_portable(c.in), c.want);
  }
}

TEST(BFloat16, HardCases) {
  struct Case { uint32_t in; uint16_t want; };
  const Case cases[] = {
      {0x7f7f0000, 0x7f7f},  // 3.3895314e38, largest finite bf16
      {0x7f7f7fff, 0x7f7f}, {0x7f7f8000, 0x7f80}, {0x7f7fffff, 0x7f80}, {0xff7f8000, 0xff80},
      {0xff7f7fff, 0xff7f}, {0x3f800000, 0x3f80}, {0x3f808000, 0x3f80}, {0x3f818000, 0x3f82},
      {0x3f808001, 0x3f81}, {0x3f807fff, 0x3f80}, {0x00000001, 0x0000}, {0x00008000, 0x0000},
      {0x00018000, 0x0002}, {0x00008001, 0x0001}, {0x007fffff, 0x0080}, {0x80008001, 0x8001},
      {0x00000000, 0x0000}, {0x80000000, 0x8000}, {0x7f800000, 0x7f80}, {0xff800000, 0xff80},
      {0x7fc00000, 0x7fc0}, {0xffc00000, 0xffc0}, {0x7f800001, 0x7fc0}, {0xff800001, 0xffc0},
      {0x7f810000, 0x7f81}, {0x7f80ffff, 0x7fc0}, {0xffffffff, 0xffff}, {0x7fa00000, 0x7fa0},
  };
  Mismatches impl("float_to_bf16_bits (hard cases)"), ref("reference (hard cases)");
  for (const Case& c : cases) {
    impl.check(c.in, float_to_bf16_bits(float_of(c.in)), c.want);
    ref.check(c.in, ref_float_to_bf16(float_of(c.in)), c.want);
    impl.check(c.in, BFloat16(float_of(c.in)).bits, c.want);
  }
  EXPECT_EQ(bits_of(bf16_bits_to_float(0x7f7f)), 0x7f7f0000u);
  EXPECT_FLOAT_EQ(bf16_bits_to_float(0x7f7f), 3.3895314e38f);
}

// ---- 3. hardware reference (F16C) --------------------------------------------------------

#if defined(__F16C__)
TEST(Half, MatchesF16C) {
  Mismatches to_half("float_to_half_bits vs _cvtss_sh"), to_float("half_bits_to_float vs _cvtsh_ss");
  Rng rng(0xf16cf16c);
  for (int64_t i = 0; i < kRandomCount; ++i) {
    uint32_t u = rng.u32();
    if (i & 1) u = (u & 0x807fffffu) | ((100u + (u >> 23 & 0xff) % 47u) << 23);
    const float f = float_of(u);
    if (std::isnan(f)) continue;
    to_half.check(u, float_to_half_bits(f), _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue;  // NaN: F16C quiets signalling ones
    to_float.check(h, bits_of(half_bits_to_float(static_cast<uint16_t>(h))),
                   bits_of(_cvtsh_ss(static_cast<unsigned short>(h))));
  }
}
#endif

// ---- 4. bulk arrays vs scalar ------------------------------------------------------------

// A mixture of random bits, values in the fp16 range, fp16 subnormals, NaNs (quiet and
// signalling), infinities, zeros and fp32 subnormals; `special` (per mille) sets how often the
// NaN/inf kinds appear, so some vector blocks are clean and others are not.
float mixed_float(Rng& rng, int special) {
  const uint32_t r = rng.u32();
  const uint32_t pick = rng.u32() % 1000;
  if (pick < static_cast<uint32_t>(special)) {
    switch (r % 6) {
      case 0: return INFINITY;
      case 1: return -INFINITY;
      case 2: return float_of(0x7fc00000u | (r & 0x803fffffu));  // quiet NaN
      case 3: return float_of(0x7f800001u | (r & 0x801fffffu));  // signalling NaN
      case 4: return float_of(0x7f800000u | (r & 0x80001fffu) | 1u);  // sNaN, low payload only
      default: return float_of(r | 0x7f800000u);                 // inf or NaN
    }
  }
  switch (r % 5) {
    case 0: return float_of(rng.u32());
    case 1: return float_of((r & 0x807fffffu) | ((103u + (r >> 23) % 41u) << 23));  // fp16 range
    case 2: return std::ldexp(static_cast<float>(r % 2048) + ((r >> 31) ? 0.5f : 0.0f), -24);  // subnormals
    case 3: return float_of(r & 0x807fffffu);  // fp32 subnormal or zero
    default: return (r & 1) ? 65504.0f + static_cast<float>(r % 32) : -65520.0f;
  }
}

std::vector<float> poisoned_floats(size_t n, uint32_t pattern) { return std::vector<float>(n, float_of(pattern)); }
template <typename T>
std::vector<T> poisoned_16(size_t n, uint16_t pattern) { return std::vector<T>(n, T::from_bits(pattern)); }

TEST(HalfArrays, BulkMatchesScalar) {
  Mismatches h2f("half_to_float_array"), f2h("float_to_half_array");
  Mismatches b2f("bf16_to_float_array"), f2b("float_to_bf16_array"), guard("bytes past n written");
  Rng rng(0xa11a7);
  const int64_t lengths[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 255, 1001, 4099};
  for (int special : {0, 2, 30, 300})
    for (int64_t n : lengths)
      for (int64_t offset : {0, 1, 3}) {  // unaligned starts too
        const size_t total = static_cast<size_t>(offset + n + 9);
        std::vector<float> fin(total);
        std::vector<Half> hin(total);
        std::vector<BFloat16> bin(total);
        for (size_t i = 0; i < total; ++i) {
          fin[i] = mixed_float(rng, special);
          uint16_t hb = static_cast<uint16_t>(rng.u32());
          if ((hb & 0x7c00) == 0x7c00 && rng.u32() % 1000 >= static_cast<uint32_t>(special)) hb ^= 0x4000;
          hin[i] = Half::from_bits(hb);
          bin[i] = BFloat16(fin[i]);
        }
        auto fout = poisoned_floats(total, 0x7fbadbadu);
        auto hout = poisoned_16<Half>(total, 0xfdfdu);
        auto bfout = poisoned_floats(total, 0xffbeefeeu);
        auto bout = poisoned_16<BFloat16>(total, 0xfdfdu);
        half_to_float_array(hin.data() + offset, fout.data() + offset, n);
        float_to_half_array(fin.data() + offset, hout.data() + offset, n);
        bf16_to_float_array(bin.data() + offset, bfout.data() + offset, n);
        float_to_bf16_array(fin.data() + offset, bout.data() + offset, n);
        for (size_t i = 0; i < total; ++i) {
          const bool inside = static_cast<int64_t>(i) >= offset && static_cast<int64_t>(i) < offset + n;
          if (!inside) {
            guard.check(static_cast<uint32_t>(i), bits_of(fout[i]), 0x7fbadbadu);
            guard.check(static_cast<uint32_t>(i), hout[i].bits, 0xfdfdu);
            guard.check(static_cast<uint32_t>(i), bits_of(bfout[i]), 0xffbeefeeu);
            guard.check(static_cast<uint32_t>(i), bout[i].bits, 0xfdfdu);
            continue;
          }
          h2f.check(hin[i].bits, bits_of(fout[i]), bits_of(half_bits_to_float(hin[i].bits)));
          f2h.check(bits_of(fin[i]), hout[i].bits, float_to_half_bits(fin[i]));
          b2f.check(bin[i].bits, bits_of(bfout[i]), bits_of(bf16_bits_to_float(bin[i].bits)));
          f2b.check(bits_of(fin[i]), bout[i].bits, float_to_bf16_bits(fin[i]));
        }
      }
}

}  // namespace
}  // namespace mixtrain
