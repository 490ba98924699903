// scaled_mm and fp8_linear against fp64 references: the operands' fp8 values decoded exactly, the
// products summed in fp64, the scales and bias applied, and each element held to a bound that
// fp32 accumulation over k terms and one rounding into the output dtype respect. fp8_linear also
// against its recorded state (amaxes, saturation counts, current scales) and in backward.
#include "backends/fp8.h"
#include "ops/op_reference.h"
#include "support/fp8_reference.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::expect_error;
using mt::testing::random_tensor;
using mt::testing::to_doubles;

namespace {

using mt::testing::fp8::product_reference;

::testing::AssertionResult within(const Tensor& got, const mt::testing::fp8::ProductReference& ref) {
  return mt::testing::fp8::within(to_doubles(got), ref);
}

// Random fp8 data spread over the format's range (and a few subnormals), as [rows, cols].
Tensor random_fp8(const mt::Shape& shape, mt::DType fmt, uint64_t seed) {
  const double span = fmt == mt::kFloat8E4M3FN ? 400.0 : 50000.0;
  Tensor x = random_tensor(shape, mt::kFloat32, seed, -1, 1);
  x = x * x * x * span;  // cubed: many small values too
  return x.to(fmt);
}

std::vector<double> values(const Tensor& t) { return to_doubles(t.contiguous().to(mt::kFloat32)); }

}  // namespace

TEST(ScaledMm, MatchesTheFp64ReferenceInEveryFormatPairAndOutputDtype) {
  struct Case {
    int64_t m, k, n;
    bool ta, tb, bias;
  };
  const Case cases[] = {{16, 32, 48, false, true, true}, {7, 19, 5, false, false, false}, {33, 64, 17, true, true, true},
                        {1, 160, 1, true, false, false}, {40, 1, 9, false, true, true}};
  const std::pair<mt::DType, mt::DType> formats[] = {{mt::kFloat8E4M3FN, mt::kFloat8E4M3FN},
                                                      {mt::kFloat8E5M2, mt::kFloat8E4M3FN},
                                                      {mt::kFloat8E4M3FN, mt::kFloat8E5M2}};
  uint64_t seed = 100;
  for (const auto& [fa, fb] : formats)
    for (mt::DType out : {mt::kFloat32, mt::kBFloat16, mt::kFloat16})
      for (const Case& c : cases) {
        SCOPED_TRACE(std::string(mt::dtype_name(fa)) + " x " + mt::dtype_name(fb) + " -> " + mt::dtype_name(out) +
                     " m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) + " n=" + std::to_string(c.n));
        // Operands stored transposed where the case says so (the backward's views).
        Tensor a = c.ta ? random_fp8({c.k, c.m}, fa, ++seed).t() : random_fp8({c.m, c.k}, fa, ++seed);
        Tensor b = c.tb ? random_fp8({c.n, c.k}, fb, ++seed).t() : random_fp8({c.k, c.n}, fb, ++seed);
        // Small scales keep fp16 outputs finite; not powers of two, so the scaling rounds.
        const float sa = out == mt::kFloat16 ? 1.7e-4f : 0.37f, sb = out == mt::kFloat16 ? 2.3e-3f : 1.9e-2f;
        const Tensor scale_a = mt::from_vector<float>({sa}, {1}), scale_b = mt::from_vector<float>({sb}, {1});
        const mt::DType bias_dtype = out == mt::kFloat32 ? mt::kBFloat16 : out;
        const Tensor bias = c.bias ? random_tensor({c.n}, bias_dtype, ++seed, -2, 2) : Tensor();
        const Tensor got = mt::scaled_mm(a, b, scale_a, scale_b, out, bias);
        ASSERT_EQ(got.dtype(), out);
        ASSERT_EQ(got.shape(), (mt::Shape{c.m, c.n}));
        const double s = static_cast<double>(sa * sb);  // the kernel multiplies by the fp32 product
        EXPECT_TRUE(within(got, product_reference(values(a), values(b), c.m, c.k, c.n, s,
                                                  c.bias ? to_doubles(bias) : std::vector<double>{}, out)));
      }
}

TEST(ScaledMm, KernelWritesEveryElementOfAPoisonedOutput) {
  const Tensor a = random_fp8({9, 24}, mt::kFloat8E4M3FN, 1), b = random_fp8({24, 11}, mt::kFloat8E5M2, 2);
  const Tensor one = mt::from_vector<float>({1e-3f}, {1});
  for (mt::DType out : {mt::kFloat32, mt::kBFloat16, mt::kFloat16}) {
    Tensor o = mt::testing::poisoned({9, 11}, out);
    mt::backends::scaled_mm(a, a, b, one, one, Tensor(), o);
    EXPECT_TRUE(mt::testing::all_finite(o)) << mt::dtype_name(out);
  }
}

TEST(ScaledMm, NaNAndSaturatedOperandsPropagate) {
  // An fp8 NaN operand gives NaN in its row; 448 x 448 x k sums stay finite in fp32.
  std::vector<uint8_t> bytes(4 * 8, 0x7e);  // 448 everywhere
  bytes[3] = 0x7f;                          // NaN in row 0
  Tensor a = mt::empty({4, 8}, mt::TensorOptions(mt::kFloat8E4M3FN));
  std::memcpy(a.raw_data(), bytes.data(), bytes.size());
  const Tensor b = mt::ones({8, 2}).to(mt::kFloat8E4M3FN);
  const Tensor one = mt::ones({1});
  const std::vector<double> got = to_doubles(mt::scaled_mm(a, b, one, one, mt::kFloat32));
  EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1]));
  for (size_t i = 2; i < got.size(); ++i) EXPECT_EQ(got[i], 448.0 * 8);
}

TEST(ScaledMm, BadArgumentsAreErrorsNamingTheOperands) {
  const Tensor a = random_fp8({4, 16}, mt::kFloat8E4M3FN, 1), b = random_fp8({16, 8}, mt::kFloat8E4M3FN, 2);
  const Tensor e5 = random_fp8({16, 8}, mt::kFloat8E5M2, 3), e5a = random_fp8({4, 16}, mt::kFloat8E5M2, 4);
  const Tensor s = mt::ones({1});
  expect_error([&] { mt::scaled_mm(e5a, e5, s, s); }, {"scaled_mm", "float8_e5m2", "not supported"});
  expect_error([&] { mt::scaled_mm(a, a, s, s); }, {"scaled_mm", "[4, 16]", "cannot be multiplied"});
  expect_error([&] { mt::scaled_mm(a.to(mt::kFloat32), b, s, s); }, {"scaled_mm", "float8", "float32"});
  expect_error([&] { mt::scaled_mm(a, b, mt::ones({2}), s); }, {"scaled_mm", "scale_a", "1-element"});
  expect_error([&] { mt::scaled_mm(a, b, s, s.to(mt::kFloat64)); }, {"scaled_mm", "scale_b", "float64"});
  expect_error([&] { mt::scaled_mm(a, b, s, s, mt::kFloat64); }, {"scaled_mm", "out_dtype", "float64"});
  expect_error([&] { mt::scaled_mm(a, b, s, s, mt::kFloat32, mt::zeros({8})); },
               {"scaled_mm", "bias", "[8] bfloat16", "float32 output"});
  expect_error([&] { mt::scaled_mm(a, b, s, s, mt::kFloat16, mt::zeros({8}, mt::TensorOptions(mt::kBFloat16))); },
               {"scaled_mm", "bias", "float16"});
}

namespace {

mt::Fp8LinearState make_state(std::vector<float> scales) {
  mt::Fp8LinearState s;
  s.scale = mt::from_vector<float>(scales, {3});
  std::vector<float> inv;
  for (float v : scales) inv.push_back(1.0f / v);
  s.scale_inv = mt::from_vector<float>(inv, {3});
  s.amax = mt::zeros({3});
  s.saturated = mt::zeros({3}, mt::TensorOptions(mt::kInt64));
  return s;
}

// The fp8 values a saturating cast of x * scale gives, decoded, divided by the scale: what the
// product sees (base/float8.h's scalar encoder, itself checked against PyTorch in tests/core).
std::vector<double> quantized(const std::vector<double>& x, float scale, mt::DType fmt, int64_t* saturated) {
  std::vector<double> out;
  const float max = fmt == mt::kFloat8E4M3FN ? 448.0f : 57344.0f;
  for (double v : x) {
    const float f = static_cast<float>(v) * scale;
    *saturated += std::fabs(f) > max;
    const float q = fmt == mt::kFloat8E4M3FN ? mt::e4m3fn_bits_to_float(mt::float_to_e4m3fn_bits(f))
                                             : mt::e5m2_bits_to_float(mt::float_to_e5m2_bits(f, true));
    out.push_back(static_cast<double>(q) * static_cast<double>(1.0f / scale));
  }
  return out;
}

std::vector<double> transpose(const std::vector<double>& v, int64_t rows, int64_t cols) {
  std::vector<double> t(v.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = v[i * cols + j];
  return t;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace

TEST(Fp8Linear, DelayedScalingForwardAndBackwardMatchTheQuantizedReference) {
  const int64_t rows = 24, in = 32, out_f = 48;
  // Scales chosen so some inputs and gradients saturate: the counts must see them.
  mt::Fp8LinearState state = make_state({40.0f, 3000.0f, 20000.0f});
  const mt::Fp8LinearConfig config;  // HYBRID: e4m3fn forward, e5m2 backward, bf16 out
  Tensor x = random_tensor({2, 12, in}, mt::kFloat32, 1, -14, 14).set_requires_grad(true);
  Tensor w = random_tensor({out_f, in}, mt::kFloat32, 2, -0.2, 0.2).set_requires_grad(true);
  Tensor b = random_tensor({out_f}, mt::kBFloat16, 3, -1, 1).set_requires_grad(true);
  Tensor y = mt::fp8_linear(x, w, b, state, config);
  ASSERT_EQ(y.shape(), (mt::Shape{2, 12, out_f}));
  ASSERT_EQ(y.dtype(), mt::kBFloat16);

  int64_t sat_x = 0, sat_w = 0, sat_g = 0;
  const std::vector<double> xv = to_doubles(x), wv = to_doubles(w);
  const std::vector<double> qx = quantized(xv, 40.0f, mt::kFloat8E4M3FN, &sat_x);
  const std::vector<double> qw = quantized(wv, 3000.0f, mt::kFloat8E4M3FN, &sat_w);
  // The kernel multiplies the sum by (1/40 * 1/3000) in fp32; the reference has the exact
  // inverse scales in the quantized values, a relative difference far inside the bound.
  EXPECT_TRUE(within(y.reshape({rows, out_f}),
                     product_reference(qx, transpose(qw, out_f, in), rows, in, out_f, 1.0, to_doubles(b), mt::kBFloat16)));
  EXPECT_GT(sat_x, 0);
  const std::vector<double> amax = to_doubles(state.amax);
  EXPECT_EQ(amax[0], static_cast<double>(static_cast<float>(max_abs(xv))));
  EXPECT_EQ(amax[1], static_cast<double>(static_cast<float>(max_abs(wv))));
  EXPECT_EQ(amax[2], 0.0);  // no backward yet

  const Tensor gw = random_tensor({2, 12, out_f}, mt::kBFloat16, 4, -3, 3);
  mt::sum(mt::mul(y, gw)).backward();
  const std::vector<double> g = to_doubles(gw);
  const std::vector<double> qg = quantized(g, 20000.0f, mt::kFloat8E5M2, &sat_g);
  EXPECT_TRUE(within(x.grad().reshape({rows, in}), product_reference(qg, qw, rows, out_f, in, 1.0, {}, mt::kFloat32)));
  EXPECT_TRUE(within(w.grad(), product_reference(transpose(qg, rows, out_f), qx, out_f, rows, in, 1.0, {}, mt::kFloat32)));
  std::vector<double> db(out_f, 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < out_f; ++j) db[j] += g[i * out_f + j];
  const std::vector<double> got_db = to_doubles(b.grad());
  for (int64_t j = 0; j < out_f; ++j) EXPECT_NEAR(got_db[j], db[j], std::fabs(db[j]) * std::ldexp(1.0, -8) + 1e-6);
  EXPECT_EQ(x.grad().dtype(), mt::kFloat32);
  EXPECT_EQ(w.grad().dtype(), mt::kFloat32);
  EXPECT_EQ(b.grad().dtype(), mt::kBFloat16);
  EXPECT_EQ(to_doubles(state.amax)[2], max_abs(g));
  EXPECT_EQ(to_doubles(state.saturated), (std::vector<double>{double(sat_x), double(sat_w), double(sat_g)}));
  EXPECT_GT(sat_g, 0);
  // Delayed scaling never writes the scales.
  EXPECT_EQ(to_doubles(state.scale), (std::vector<double>{40.0, 3000.0, 20000.0}));
}

TEST(Fp8Linear, CurrentScalingTakesEachTensorsOwnScale) {
  mt::Fp8LinearState state = make_state({1.0f, 1.0f, 1.0f});
  mt::Fp8LinearConfig config;
  config.current_scaling = true;
  config.margin = 1;
  config.backward_dtype = mt::kFloat8E4M3FN;  // the E4M3 format
  Tensor x = random_tensor({16, 32}, mt::kBFloat16, 5, -900, 900).set_requires_grad(true);
  Tensor w = random_tensor({16, 32}, mt::kFloat32, 6, -1e-3, 1e-3).set_requires_grad(true);
  Tensor y = mt::fp8_linear(x, w, Tensor(), state, config);
  mt::sum(y * y.detach()).backward();
  const std::vector<double> amax = to_doubles(state.amax), scale = to_doubles(state.scale);
  for (int j = 0; j < 3; ++j) {
    const float want = (448.0f / static_cast<float>(amax[j])) / 2.0f;
    EXPECT_EQ(scale[j], want) << "slot " << j;
    EXPECT_EQ(to_doubles(state.scale_inv)[j], 1.0f / want) << "slot " << j;
  }
  EXPECT_EQ(to_doubles(state.saturated), (std::vector<double>{0, 0, 0}));  // a current scale never saturates
  // Inputs far outside e4m3's range still come out right: the forward is close to fp64's.
  const std::vector<double> ref = product_reference(to_doubles(x), transpose(to_doubles(w), 16, 32), 16, 32, 16, 1.0,
                                                    {}, mt::kFloat64).value;
  const std::vector<double> got = to_doubles(y);
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) err += (got[i] - ref[i]) * (got[i] - ref[i]), norm += ref[i] * ref[i];
  EXPECT_LT(std::sqrt(err / norm), 0.08);
  EXPECT_EQ(x.grad().dtype(), mt::kBFloat16);
}

TEST(Fp8Linear, BadStateOrFormatsAreErrors) {
  const Tensor x = random_tensor({4, 16}, mt::kFloat32, 1), w = random_tensor({8, 16}, mt::kFloat32, 2);
  mt::Fp8LinearState state = make_state({1, 1, 1});
  mt::Fp8LinearConfig config;
  mt::Fp8LinearState short_state = state;
  short_state.scale = mt::ones({2});
  expect_error([&] { mt::fp8_linear(x, w, Tensor(), short_state, config); }, {"fp8_linear", "fp32 [3]", "[2]"});
  mt::Fp8LinearConfig both_e5 = config;
  both_e5.forward_dtype = mt::kFloat8E5M2;
  expect_error([&] { mt::fp8_linear(x, w, Tensor(), state, both_e5); }, {"fp8_linear", "not both float8_e5m2"});
  expect_error([&] { mt::fp8_linear(x, w, mt::zeros({8}), state, config); }, {"fp8_linear", "bias", "bfloat16"});
  expect_error([&] { mt::fp8_linear(x.to(mt::kFloat64), w, Tensor(), state, config); }, {"fp8_linear", "float64"});
  expect_error([&] { mt::to_float8(x.to(mt::kFloat64), mt::kFloat8E4M3FN); }, {"to_float8", "float64"});
  expect_error([&] { mt::to_float8(x, mt::kBFloat16); }, {"to_float8", "bfloat16"});
}
