#pragma once
// The fp8 cast reference the tests share (test_float8.cpp, test_cpu_fp8.cpp): PyTorch's results
// from tests/core/data/fp8_torch_reference.json (written by make_fp8_reference.py), their inputs
// regenerated here, and an encoder written independently of base/float8.h's bit manipulation
// (the nearest of the format's values found by search, ties to the even byte), which the tests
// first check against PyTorch's results and then hold mixtrain's casts to, element by element.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "mixtrain/base/dtype.h"

namespace mixtrain::testing::fp8 {

inline nlohmann::json load_torch_reference() {
  std::ifstream in(std::string(MT_SOURCE_DIR) + "/tests/core/data/fp8_torch_reference.json");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

inline uint64_t splitmix64(uint64_t seed, uint64_t i) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A case's input bit patterns (the generator's stream_bits; all 65536 for "all").
inline std::vector<uint64_t> case_inputs(const nlohmann::json& c) {
  const nlohmann::json& in = c["inputs"];
  const std::string kind = in["kind"];
  std::vector<uint64_t> bits;
  if (kind == "all") {
    for (uint64_t u = 0; u < 65536; ++u) bits.push_back(u);
    return bits;
  }
  const uint64_t seed = in["seed"], count = in["count"];
  bits.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t r = splitmix64(seed, i), sign = r >> 63;
    if (kind == "bits") bits.push_back(r >> 32);
    else if (kind == "range") bits.push_back(sign << 31 | (97 + (r >> 40) % 51) << 23 | (r & 0x7fffff));
    else if (kind == "ties") bits.push_back(sign << 31 | (107 + (r >> 40) % 38) << 23 | (r & 0x3f) << 17);
    else bits.push_back(sign << 63 | (993 + (r >> 40) % 51) << 52 | (r & 0xfffffffffffffull));  // f64
  }
  return bits;
}

// An input pattern of `source` ("float16", "bfloat16", "float32", "float64") as the fp32 value the
// cast starts from (fp64 rounds to fp32 first, as PyTorch does).
inline float source_value(const std::string& source, uint64_t bits) {
  if (source == "float16") return static_cast<float>(Half::from_bits(static_cast<uint16_t>(bits)));
  if (source == "bfloat16") return static_cast<float>(BFloat16::from_bits(static_cast<uint16_t>(bits)));
  if (source == "float32") {
    float f;
    const auto u = static_cast<uint32_t>(bits);
    std::memcpy(&f, &u, 4);
    return f;
  }
  double d;
  std::memcpy(&d, &bits, 8);
  return static_cast<float>(d);
}

// The positive values of a format by byte, from its definition (no bit tricks): e4m3fn bytes
// 0..0x7e, e5m2 bytes 0..0x7b and, standing for inf, 65536 at 0x7c (where round to nearest even
// sends 61440 and up).
inline std::vector<double> positive_values(bool e5m2) {
  std::vector<double> v;
  const int mant = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7, last = e5m2 ? 0x7c : 0x7e;
  for (int b = 0; b <= last; ++b) {
    const int e = b >> mant, m = b & ((1 << mant) - 1);
    v.push_back(e == 0 ? std::ldexp(m, 1 - bias - mant) : std::ldexp(1.0 + std::ldexp(m, -mant), e - bias));
  }
  return v;
}

// The reference cast of fp32 value f (PyTorch's rules, docs/REFERENCE_AMP.md "FP8").
inline uint8_t reference_encode(float f, bool e5m2, bool saturate) {
  static const std::vector<double> e4 = positive_values(false), e5 = positive_values(true);
  const std::vector<double>& vals = e5m2 ? e5 : e4;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return sign | 0x7f;
  const double a = std::fabs(static_cast<double>(f));
  if (!e5m2 && a >= 448.0) return sign | 0x7e;  // e4m3fn saturates, inf included
  if (e5m2 && saturate && a > 57344.0) return sign | 0x7b;
  if (e5m2 && a >= 65536.0) return sign | 0x7c;
  // The two neighbours lo <= a < hi; the nearer wins, a tie goes to the even byte.
  const size_t hi = static_cast<size_t>(std::upper_bound(vals.begin(), vals.end(), a) - vals.begin());
  const size_t lo = hi - 1;
  if (hi == vals.size() || vals[lo] == a) return sign | static_cast<uint8_t>(lo);
  const double twice = 2 * a, mid = vals[lo] + vals[hi];
  const size_t pick = twice < mid ? lo : twice > mid ? hi : (lo % 2 == 0 ? lo : hi);
  return sign | static_cast<uint8_t>(pick);
}

// A case of the JSON: its target format, saturation and scale.
struct CaseView {
  std::string name, source;
  bool e5m2 = false, saturate = false, scaled = false;
  float scale = 1.0f;
};

inline CaseView view(const nlohmann::json& c) {
  CaseView v;
  v.name = c["name"];
  v.source = c["source"];
  v.e5m2 = c["target"] == "float8_e5m2";
  v.saturate = c["saturate"];
  v.scaled = !c["scale"].is_null();
  if (v.scaled) v.scale = static_cast<float>(c["scale"].get<double>());
  return v;
}

// The value a case's cast encodes: the source value, times the scale in fp32 when there is one.
inline float cast_value(const CaseView& v, uint64_t bits) {
  const float x = source_value(v.source, bits);
  return v.scaled ? x * v.scale : x;
}

inline uint32_t hex_of(const std::string& s) { return static_cast<uint32_t>(std::stoul(s, nullptr, 16)); }

inline float float_of_hex(const std::string& s) {
  const uint32_t u = hex_of(s);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t crc32(const uint8_t* data, size_t n) {
  static uint32_t table[256];
  static const bool filled = [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return true;
  }();
  (void)filled;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ data[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

inline std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// The fp64 reference of a scaled product, out = s * (a b) + bias (a [m, k], b [k, n] and bias as
// row-major fp64 values, an empty bias for none), and per element the bound an implementation with
// exact products, fp32 sums over k terms and one rounding into `out` stays within: k + 2 ulps of
// fp32 over the sum of the products' magnitudes, plus the output's rounding (fp16's subnormal
// step included). accumulator_bits < 24: an implementation whose partial sums keep fewer bits
// (Hopper's fp8 tensor cores keep about 14 between cuBLASLt's promotions to fp32, as DeepSeek-V3's
// report measured; 2026-11-28 on an H200 our errors reached 6.2 roundings of 2^-14 over the
// magnitudes' sum) gets 8 roundings of that width over the magnitudes' sum as well.
struct ProductReference {
  std::vector<double> value, bound;
};

inline ProductReference product_reference(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                                          int64_t k, int64_t n, double s, const std::vector<double>& bias, DType out,
                                          int accumulator_bits = 24) {
  const double u = out == kBFloat16 ? std::ldexp(1.0, -8) : out == kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -24);
  ProductReference r;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, abs_sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        sum += a[i * k + p] * b[p * n + j];
        abs_sum += std::fabs(a[i * k + p] * b[p * n + j]);
      }
      const double v = s * sum + (bias.empty() ? 0.0 : bias[j]);
      r.value.push_back(v);
      const double narrow = accumulator_bits < 24 ? 8.0 * std::ldexp(1.0, -accumulator_bits) : 0.0;
      r.bound.push_back((static_cast<double>(k + 2) * std::ldexp(1.0, -24) + narrow) * std::fabs(s) * abs_sum +
                        u * std::fabs(v) * 1.0001 + (out == kFloat16 ? std::ldexp(1.0, -25) : 1e-30));
    }
  return r;
}

inline ::testing::AssertionResult within(const std::vector<double>& got, const ProductReference& ref) {
  if (got.size() != ref.value.size()) return ::testing::AssertionFailure() << "size " << got.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - ref.value[i]) <= ref.bound[i]))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", reference " << ref.value[i]
                                           << " (bound " << ref.bound[i] << ")";
  return ::testing::AssertionSuccess();
}

}  // namespace mixtrain::testing::fp8
