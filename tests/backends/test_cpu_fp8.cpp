// The CPU backend's fp8 kernels: the bulk casts (portable and AVX-512 copies) against the
// reference that reproduces PyTorch (support/fp8_reference.h) on every case of
// tests/core/data/fp8_torch_reference.json, with their amax and saturation counts; the copy
// kernel's casts both ways and in strided layouts; and the recipes' scale update.
#include "backends/cpu/fp8_convert.h"
#include "backends/fp8.h"
#include "backends/fp8_math.h"
#include "support/fp8_reference.h"
#include "support/testing.h"

namespace mixtrain::testing {
namespace {

namespace cpu = backends::cpu;

// The bulk cast of one case's inputs (fp32, fp16 or bf16 sources) against the reference, the
// statistics against PyTorch's.
void check_bulk_case(const nlohmann::json& c) {
  const fp8::CaseView v = fp8::view(c);
  if (v.source == "float64") return;  // no bulk path: fp64 goes through the copy kernel's scalar loop
  SCOPED_TRACE(v.name);
  const std::vector<uint64_t> bits = fp8::case_inputs(c);
  const size_t n = bits.size();
  std::vector<uint8_t> want(n), got(n, 0xaa);
  for (size_t i = 0; i < n; ++i) want[i] = fp8::reference_encode(fp8::cast_value(v, bits[i]), v.e5m2, v.saturate);
  const DType fmt = v.e5m2 ? kFloat8E5M2 : kFloat8E4M3FN;
  const float* scale = v.scaled ? &v.scale : nullptr;
  cpu::Fp8CastStats stats, only_stats;
  if (v.source == "float32") {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = fp8::source_value(v.source, bits[i]);
    stats = cpu::to_fp8_array(x.data(), got.data(), static_cast<int64_t>(n), fmt, scale, v.saturate, true);
    only_stats = cpu::to_fp8_array(x.data(), nullptr, static_cast<int64_t>(n), fmt, scale, v.saturate, true);
  } else {
    std::vector<uint16_t> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<uint16_t>(bits[i]);
    if (v.source == "float16") {
      const auto* p = reinterpret_cast<const Half*>(x.data());
      stats = cpu::to_fp8_array(p, got.data(), static_cast<int64_t>(n), fmt, scale, v.saturate, true);
      only_stats = cpu::to_fp8_array(p, nullptr, static_cast<int64_t>(n), fmt, scale, v.saturate, true);
    } else {
      const auto* p = reinterpret_cast<const BFloat16*>(x.data());
      stats = cpu::to_fp8_array(p, got.data(), static_cast<int64_t>(n), fmt, scale, v.saturate, true);
      only_stats = cpu::to_fp8_array(p, nullptr, static_cast<int64_t>(n), fmt, scale, v.saturate, true);
    }
  }
  int64_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    if (got[i] != want[i] && bad++ < 5)
      ADD_FAILURE() << "input bits " << std::hex << bits[i] << ": got 0x" << int(got[i]) << ", expected 0x"
                    << int(want[i]) << std::dec;
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(fp8::hex32(fp8::crc32(got.data(), n)), c["crc32"].get<std::string>());
  EXPECT_EQ(stats.amax, fp8::float_of_hex(c["amax_bits"]));
  EXPECT_EQ(stats.saturated, c["saturated"].get<int64_t>());
  EXPECT_EQ(only_stats.amax, stats.amax);
  EXPECT_EQ(only_stats.saturated, stats.saturated);
}

struct Avx512Override {
  explicit Avx512Override(int mode) : active(cpu::set_fp8_avx512_override(mode)) {}
  ~Avx512Override() { cpu::set_fp8_avx512_override(-1); }
  bool active;
};

TEST(CpuFp8, PortableBulkCastsMatchPyTorchOnEveryCase) {
  const Avx512Override portable(0);
  ASSERT_FALSE(portable.active);
  const nlohmann::json ref = fp8::load_torch_reference();
  ASSERT_GE(ref["cases"].size(), 19u) << "tests/core/data/fp8_torch_reference.json is missing or unreadable";
  for (const nlohmann::json& c : ref["cases"]) check_bulk_case(c);
}

TEST(CpuFp8, Avx512BulkCastsMatchPyTorchOnEveryCase) {
  const Avx512Override avx512(1);
  if (!avx512.active)
    GTEST_SKIP() << "the AVX-512 copy is not in use here (a CPU without AVX-512, MIXTRAIN_CPU_ISA, or a native build)";
  const nlohmann::json ref = fp8::load_torch_reference();
  ASSERT_GE(ref["cases"].size(), 19u) << "tests/core/data/fp8_torch_reference.json is missing or unreadable";
  for (const nlohmann::json& c : ref["cases"]) check_bulk_case(c);
}

// An fp8 tensor holding the given bytes.
Tensor fp8_tensor(const std::vector<uint8_t>& bytes, DType dtype, const Shape& shape) {
  Tensor t = empty(shape, TensorOptions(dtype));
  std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

TEST(CpuFp8, ToCastsEveryElementAsTheScalarEncoderAcrossThreads) {
  // Large enough to be split over the threads; values across both formats' ranges.
  const Tensor x = random_tensor({257, 391}, kFloat32, 5, -70000.0, 70000.0) * random_tensor({257, 391}, kFloat32, 6, 0, 1).pow(8.0);
  const std::vector<double> xs = to_doubles(x);
  for (DType src : {kFloat32, kBFloat16, kFloat16}) {
    const Tensor xc = x.to(src);
    const std::vector<double> vals = to_doubles(xc);
    for (DType fmt : {kFloat8E4M3FN, kFloat8E5M2}) {
      SCOPED_TRACE(std::string(dtype_name(src)) + " -> " + dtype_name(fmt));
      Tensor q = xc.to(fmt);
      ASSERT_EQ(q.dtype(), fmt);
      const std::vector<uint8_t> got = bytes_of(q);
      int64_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const float f = static_cast<float>(vals[i]);
        const uint8_t want = fmt == kFloat8E5M2 ? float_to_e5m2_bits(f) : float_to_e4m3fn_bits(f);
        bad += got[i] != want;
      }
      EXPECT_EQ(bad, 0);
      // Strided source (a transposed view): the copy kernel's element loop, the same bytes.
      EXPECT_EQ(bytes_of(xc.t().to(fmt).t().contiguous()), got);
    }
  }
}

TEST(CpuFp8, EveryByteDecodesThroughToAsTheScalarDecoder) {
  std::vector<uint8_t> all(256);
  for (int b = 0; b < 256; ++b) all[b] = static_cast<uint8_t>(b);
  for (DType fmt : {kFloat8E4M3FN, kFloat8E5M2}) {
    SCOPED_TRACE(dtype_name(fmt));
    const Tensor q = fp8_tensor(all, fmt, {16, 16});
    const std::vector<double> f32 = to_doubles(q.to(kFloat32));
    const std::vector<double> bf16 = to_doubles(q.to(kBFloat16)), f16 = to_doubles(q.to(kFloat16));
    const std::vector<double> f64 = to_doubles(q.to(kFloat64)), strided = to_doubles(q.t().to(kFloat32).t());
    for (int b = 0; b < 256; ++b) {
      const float want = fmt == kFloat8E5M2 ? e5m2_bits_to_float(all[b]) : e4m3fn_bits_to_float(all[b]);
      for (const auto* got : {&f32, &bf16, &f16, &f64, &strided}) {
        if (std::isnan(want)) EXPECT_TRUE(std::isnan((*got)[b])) << "byte " << b;
        else EXPECT_EQ((*got)[b], want) << "byte " << b;
      }
    }
    // fp8 -> fp8 of the other format: through fp32.
    const DType other = fmt == kFloat8E5M2 ? kFloat8E4M3FN : kFloat8E5M2;
    const std::vector<uint8_t> crossed = bytes_of(q.to(other));
    for (int b = 0; b < 256; ++b) {
      const float v = static_cast<float>(f32[b]);
      EXPECT_EQ(crossed[b], other == kFloat8E5M2 ? float_to_e5m2_bits(v) : float_to_e4m3fn_bits(v)) << "byte " << b;
    }
  }
}

TEST(CpuFp8, FillsAndZerosWork) {
  Tensor z = zeros({3, 5}, TensorOptions(kFloat8E4M3FN));
  for (uint8_t b : bytes_of(z)) EXPECT_EQ(b, 0);
  Tensor t = empty({7}, TensorOptions(kFloat8E5M2));
  t.fill_(1000.0);  // 1000 rounds to 1024 in e5m2
  for (double v : to_doubles(t)) EXPECT_EQ(v, 1024.0);
}

TEST(CpuFp8, CastKernelAccumulatesItsStatistics) {
  // amax is a running max and saturated a running count: earlier values stay unless exceeded.
  const Tensor x = from_vector<float>({1.0f, -600.0f, 3.0f, std::nanf(""), 20.0f, -0.5f}, {6});
  Tensor amax = from_vector<float>({50.0f}, {1}), count = from_vector<int64_t>({7}, {1});
  const Tensor scale = from_vector<float>({2.0f}, {1});
  Tensor out = empty({6}, TensorOptions(kFloat8E4M3FN));
  poison(out);
  backends::cast_to_fp8(x, x, out, kFloat8E4M3FN, scale, true, amax, count);
  EXPECT_EQ(amax.item<float>(), 600.0f);  // NaN ignored
  EXPECT_EQ(count.item<int64_t>(), 7 + 1);  // |-600 * 2| > 448; 20 * 2 = 40 is not
  const std::vector<double> back = to_doubles(out.to(kFloat32));
  EXPECT_EQ(back[0], 2.0);
  EXPECT_EQ(back[1], -448.0);
  EXPECT_TRUE(std::isnan(back[3]));
  EXPECT_EQ(back[4], 40.0);
  // Statistics only (no output): the same amax and count.
  Tensor amax2 = zeros({1}), count2 = zeros({1}, TensorOptions(kInt64));
  backends::cast_to_fp8(x, x, Tensor(), kFloat8E4M3FN, scale, true, amax2, count2);
  EXPECT_EQ(amax2.item<float>(), 600.0f);
  EXPECT_EQ(count2.item<int64_t>(), 1);
}

// The scale rule written out (kernel_types.h, Fp8ScaleArgs) for the expectations below.
float rule(float amax, float fp8_max, int margin) {
  return (fp8_max / std::max(amax, 1e-12f)) / std::ldexp(1.0f, margin);
}

TEST(CpuFp8, DelayedScaleUpdateTakesTheHistorysMaxAndRolls) {
  // Three slots, four rows: row 0 this step's amaxes, then earlier steps'.
  Tensor h = from_vector<float>({2.0f, 0.0f, 8.0f,  //
                                 5.0f, 0.0f, 1.0f,  //
                                 1.0f, 0.0f, 0.5f,  //
                                 3.0f, 0.0f, 16.0f},
                                {4, 3});
  Tensor s = from_vector<float>({1.0f, 7.0f, 1.0f}, {3}), si = zeros({3});
  backends::Fp8ScaleArgs args;
  args.fp8_max[2] = 57344.0f;
  args.margin = 1;
  backends::fp8_update_scale(h, h, s, si, args);
  const std::vector<double> sv = to_doubles(s), siv = to_doubles(si);
  EXPECT_EQ(sv[0], rule(5.0f, 448.0f, 1));
  EXPECT_EQ(sv[1], 7.0f);  // amax 0 over the whole history: the scale is kept
  EXPECT_EQ(sv[2], rule(16.0f, 57344.0f, 1));
  for (int j = 0; j < 3; ++j) EXPECT_EQ(siv[j], 1.0f / static_cast<float>(sv[j]));
  // Rolled: row 0 zeroed, the others moved down one, the oldest dropped.
  EXPECT_EQ(to_doubles(h), (std::vector<double>{0, 0, 0, 2, 0, 8, 5, 0, 1, 1, 0, 0.5}));

  // most_recent reads row 0 only; inf keeps the scale.
  Tensor h2 = from_vector<float>({4.0f, std::numeric_limits<float>::infinity(), 0.0f, 100.0f, 1.0f, 1.0f}, {2, 3});
  Tensor s2 = from_vector<float>({1.0f, 3.0f, 5.0f}, {3}), si2 = zeros({3});
  args = backends::Fp8ScaleArgs();
  args.max_over_history = false;
  args.roll = false;
  backends::fp8_update_scale(h2, h2, s2, si2, args);
  EXPECT_EQ(to_doubles(s2), (std::vector<double>{rule(4.0f, 448.0f, 0), 3.0, 5.0}));
  EXPECT_EQ(to_doubles(h2)[3], 100.0);  // not rolled
}

TEST(CpuFp8, CurrentScalingClampsZeroAndTinyAmaxes) {
  Tensor h = from_vector<float>({0.0f, 1e-20f, std::numeric_limits<float>::infinity(), 3.5f}, {1, 4});
  Tensor s = from_vector<float>({9.0f, 9.0f, 9.0f, 9.0f}, {4}), si = zeros({4});
  backends::Fp8ScaleArgs args;
  args.keep_scale_on_zero = false;
  args.max_over_history = false;
  args.roll = false;
  backends::fp8_update_scale(h, h, s, si, args);
  EXPECT_EQ(to_doubles(s), (std::vector<double>{rule(0.0f, 448.0f, 0), rule(1e-20f, 448.0f, 0), 1.0, rule(3.5f, 448.0f, 0)}));
  EXPECT_TRUE(std::isfinite(to_doubles(si)[0]));
}

}  // namespace
}  // namespace mixtrain::testing
