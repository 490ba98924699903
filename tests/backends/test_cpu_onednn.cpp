// oneDNN as the CPU's GEMM and convolution engine (src/backends/cpu/onednn): the gemm kernel on
// odd shapes, both layouts of each operand, strided and batched operands, bias and ReLU, and the
// three convolution kernels with strides, padding, dilation and groups, NCHW and channels-last,
// all in fp32 and bf16 against fp64 references into NaN-poisoned outputs; bf16 outputs rounded
// once, to nearest even, after the bias; the switch and the size threshold; results that do not
// depend on the governor or on being called inside a parallel region. Skipped, saying why, in a
// library built without oneDNN. oneDNN 2.6 has bf16 only from AVX-512 up: on a CPU without it (or
// under MIXTRAIN_CPU_ISA=avx2) bf16 calls run its fp32 primitives on widened operands, rounded once
// into the bf16 output, and must meet the same bounds; each test prints which way its bf16 cases
// ran.
#include <cmath>
#include <cstring>
#include <vector>

#include <omp.h>

#include "backends/all_kernels.h"
#include "backends/cpu/onednn/onednn.h"
#include "backends/cpu/threads.h"
#include "backends/cpu/verbose.h"
#include "ops/op_reference.h"

namespace mt = mixtrain;
namespace cpu = mixtrain::backends::cpu;
using mt::Tensor;
using mt::backends::Conv2dParams;
using mt::backends::GemmEpilogue;
using namespace mixtrain::testing;

namespace {

// Forces a mode for one test, and restores the environment's choice when it ends.
struct OneDnnOverride {
  explicit OneDnnOverride(cpu::OneDnnMode mode) { cpu::set_onednn_override(static_cast<int>(mode)); }
  ~OneDnnOverride() { cpu::set_onednn_override(-1); }
};

#define SKIP_WITHOUT_ONEDNN() \
  if (!cpu::onednn_built()) GTEST_SKIP() << "this mixtrain is built without oneDNN (libdnnl-dev missing or -DMIXTRAIN_ONEDNN=OFF)"

const mt::DeviceType kCpu = mt::DeviceType::CPU;

// oneDNN runs fp32 and bf16 calls wherever it is built: bf16 on its bf16 kernels where its own
// ISA query says AVX-512 (cpu::onednn_runs_bf16), else widened to its fp32 ones. Which of the
// two is printed once per test that runs a bf16 case.
void say_bf16_path() {
  static bool said = false;
  if (said) return;
  std::printf("bf16 here: %s\n", cpu::onednn_runs_bf16()
                                      ? "oneDNN's bf16 kernels (its effective ISA has AVX-512)"
                                      : "oneDNN's fp32 kernels on widened operands, rounded once (no bf16 below "
                                        "AVX-512 in oneDNN 2.6, on this CPU or under its cap)");
  said = true;
}

// op(a) @ op(b) (+ bias, then ReLU) in fp64 with plain loops; op transposes the last two dims.
// a, b: [batch?, ...]; a 2-D b is broadcast over a 3-D a's batch. `magnitude` gets each output's
// sum of |terms|, for the error bound below.
Values gemm_ref(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& bias, bool relu,
                Values* magnitude = nullptr) {
  const Tensor oa = ta ? a.transpose(-1, -2) : a, ob = tb ? b.transpose(-1, -2) : b;
  const Values av = to_doubles(oa), bv = to_doubles(ob), biasv = bias.defined() ? to_doubles(bias) : Values{};
  const int64_t batch = a.dim() == 3 ? a.size(0) : 1, m = oa.size(-2), k = oa.size(-1), n = ob.size(-1);
  const int64_t b_step = b.dim() == 3 ? k * n : 0;
  Values out(static_cast<size_t>(batch * m * n)), mag(out.size());
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = biasv.empty() ? 0.0 : biasv[static_cast<size_t>(j)], sm = std::fabs(s);
        for (int64_t q = 0; q < k; ++q) {
          const double t = av[static_cast<size_t>(bi * m * k + i * k + q)] * bv[static_cast<size_t>(bi * b_step + q * n + j)];
          s += t;
          sm += std::fabs(t);
        }
        const size_t at = static_cast<size_t>((bi * m + i) * n + j);
        out[at] = relu && s <= 0 ? 0.0 : s;
        mag[at] = sm;
      }
  if (magnitude) *magnitude = mag;
  return out;
}

// Runs the gemm kernel into a poisoned output and checks it against the fp64 reference, and that
// oneDNN ran it. The bound holds for fp32 sums of k terms in any order, (k + 2) u sum|terms|, plus
// the output's rounding: a wrong or missing term would be of the order of the terms themselves.
// oneDNN runs it where it takes the dtype on this CPU, the own kernels meet the same bound where not.
void check_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& bias, GemmEpilogue epi,
                const std::string& what) {
  const int64_t m = ta ? a.size(-1) : a.size(-2), n = tb ? b.size(-2) : b.size(-1), k = ta ? a.size(-2) : a.size(-1);
  const mt::Shape shape = a.dim() == 3 ? mt::Shape{a.size(0), m, n} : mt::Shape{m, n};
  Tensor out = poisoned(shape, a.dtype());
  const int64_t before = cpu::onednn_calls();
  mt::backends::gemm(kCpu, a, ta, b, tb, out, bias, epi);
  if (a.dtype() == mt::kBFloat16) say_bf16_path();
  EXPECT_EQ(cpu::onednn_calls(), before + 1) << what << ": oneDNN did not run it";
  Values mag;
  const Values ref = gemm_ref(a, ta, b, tb, bias, epi == GemmEpilogue::Relu, &mag), got = to_doubles(out);
  const double u = std::ldexp(1.0, -24), u_out = a.dtype() == mt::kBFloat16 ? std::ldexp(1.0, -8) : u;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double bound = static_cast<double>(k + 2) * u * mag[i] + 1.01 * u_out * std::fabs(ref[i]);
    ASSERT_LE(std::fabs(got[i] - ref[i]), bound) << what << " at " << i << ": got " << got[i] << ", expected " << ref[i];
  }
}

std::string gemm_case(mt::DType dt, int64_t m, int64_t n, int64_t k, bool ta, bool tb, bool bias, bool relu) {
  return std::string(mt::dtype_name(dt)) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
         " k=" + std::to_string(k) + (ta ? " a^T" : "") + (tb ? " b^T" : "") + (bias ? " bias" : "") +
         (relu ? " relu" : "");
}

TEST(CpuOneDnn, GemmMatchesFp64OnOddShapesLayoutsBiasAndRelu) {
  SKIP_WITHOUT_ONEDNN();
  OneDnnOverride all(cpu::OneDnnMode::All);
  const int64_t shapes[][3] = {{1, 7, 33}, {33, 1, 7}, {7, 33, 1}, {33, 129, 65}, {129, 65, 257}, {300, 520, 215}};
  uint64_t seed = 1;
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16})
    for (const auto& s : shapes)
      for (int variant = 0; variant < 16; ++variant) {
        const bool ta = variant & 1, tb = variant & 2, with_bias = variant & 4, relu = variant & 8;
        const int64_t m = s[0], n = s[1], k = s[2];
        const Tensor a = random_tensor(ta ? mt::Shape{k, m} : mt::Shape{m, k}, dt, ++seed);
        const Tensor b = random_tensor(tb ? mt::Shape{n, k} : mt::Shape{k, n}, dt, ++seed);
        const Tensor bias = with_bias ? random_tensor({n}, dt, ++seed) : Tensor();
        check_gemm(a, ta, b, tb, bias, relu ? GemmEpilogue::Relu : GemmEpilogue::None,
                   gemm_case(dt, m, n, k, ta, tb, with_bias, relu));
        if (HasFatalFailure()) return;
      }
}

TEST(CpuOneDnn, GemmReadsStridedAndBatchedOperandsInPlace) {
  SKIP_WITHOUT_ONEDNN();
  OneDnnOverride all(cpu::OneDnnMode::All);
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16}) {
    const std::string name = mt::dtype_name(dt);
    // Leading dimensions wider than the matrices: columns of wider tensors.
    const Tensor wide_a = random_tensor({37, 70}, dt, 3), wide_b = random_tensor({90, 41}, dt, 4);
    check_gemm(wide_a.narrow(1, 3, 50), false, wide_b.narrow(0, 5, 50).narrow(1, 2, 30), false, Tensor(),
               GemmEpilogue::None, name + " strided rows");
    check_gemm(wide_a.narrow(1, 3, 50), false, wide_b.narrow(1, 2, 30).narrow(0, 7, 50).t().t(), false,
               random_tensor({30}, dt, 5), GemmEpilogue::Relu, name + " strided, bias, relu");
    // Batched, each operand either way round, and a 2-D b broadcast over the batch.
    for (int variant = 0; variant < 4; ++variant) {
      const bool ta = variant & 1, tb = variant & 2;
      const Tensor a = random_tensor(ta ? mt::Shape{5, 40, 17} : mt::Shape{5, 17, 40}, dt, 10 + variant);
      const Tensor b = random_tensor(tb ? mt::Shape{5, 9, 40} : mt::Shape{5, 40, 9}, dt, 20 + variant);
      check_gemm(a, ta, b, tb, Tensor(), GemmEpilogue::None, name + " batched" + (ta ? " a^T" : "") + (tb ? " b^T" : ""));
      check_gemm(a, ta, tb ? b.select(0, 1) : b.select(0, 2), tb, random_tensor({9}, dt, 30), GemmEpilogue::Relu,
                 name + " batched, b broadcast, bias, relu");
    }
  }
}

// Sums whose exact value lies halfway between two bf16 numbers: round to nearest even gives
// 1 for 1 + 2^-8 and 1 + 2^-6 for 1 + 3 * 2^-8 (truncation would give 1 + 2^-7 for the second,
// rounding half away from zero 1 + 2^-7 for the first). With a bias of 2^-9 added before the one
// rounding, 1 + 2^-8 + 2^-9 rounds to 1 + 2^-7; rounding the product first would give 1.
const float kTieExpected[3] = {1.0f, 1.015625f, -1.0f};
const float kTieExpectedWithBias[3] = {1.0078125f, 1.015625f, -1.0f};

Tensor bf16_values(const std::vector<float>& v, const mt::Shape& shape) {
  return mt::from_vector(v, shape).to(mt::kBFloat16);
}

void expect_values(const Tensor& t, const float* expected, size_t n, const std::string& what) {
  const Values v = to_doubles(t);
  ASSERT_EQ(v.size(), n) << what;
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(v[i], expected[i]) << what << " element " << i;
}

TEST(CpuOneDnn, Bf16ResultsRoundOnceToNearestEvenAfterTheBias) {
  SKIP_WITHOUT_ONEDNN();
  OneDnnOverride all(cpu::OneDnnMode::All);
  const Tensor a = bf16_values({1, 0.0625f, 1, 0.1875f, -1, -0.0625f}, {3, 2});
  const Tensor b = bf16_values({1, 0.0625f}, {2, 1});
  const Tensor bias = bf16_values({1.0f / 512}, {1});
  Tensor out = poisoned({3, 1}, mt::kBFloat16);
  const int64_t before = cpu::onednn_calls();
  mt::backends::gemm(kCpu, a, false, b, false, out, Tensor(), GemmEpilogue::None);
  expect_values(out, kTieExpected, 3, "gemm");
  mt::backends::gemm(kCpu, a, false, b, false, out, bias, GemmEpilogue::None);
  expect_values(out, kTieExpectedWithBias, 3, "gemm + bias");

  // The same sums from the three convolution kernels (1x1, so each output is one dot product).
  Conv2dParams p;
  const Tensor x = bf16_values({1, 1, -1, 0.0625f, 0.1875f, -0.0625f}, {1, 2, 1, 3});  // column s = kTieA[s]
  const Tensor w = bf16_values({1, 0.0625f}, {1, 2, 1, 1});
  Tensor y = poisoned({1, 1, 1, 3}, mt::kBFloat16);
  mt::backends::conv2d(kCpu, x, w, Tensor(), p, y);
  expect_values(y, kTieExpected, 3, "conv2d");
  mt::backends::conv2d(kCpu, x, w, bias, p, y);
  expect_values(y, kTieExpectedWithBias, 3, "conv2d + bias");
  // grad_x[0, 0, 0, s] = sum over o of w[o] * grad_out[0, o, 0, s].
  Tensor gx = poisoned({1, 1, 1, 3}, mt::kBFloat16);
  mt::backends::conv2d_backward_input(kCpu, x, w.reshape({2, 1, 1, 1}), p, gx);
  expect_values(gx, kTieExpected, 3, "conv2d_backward_input");
  // grad_w[0, c] = sum over pixels of grad_out * x[c]: two pixels, three input channels.
  const Tensor xw = bf16_values({1, 0.0625f, 1, 0.1875f, -1, -0.0625f}, {1, 3, 1, 2});
  const Tensor go = bf16_values({1, 0.0625f}, {1, 1, 1, 2});
  Tensor gw = poisoned({1, 3, 1, 1}, mt::kBFloat16);
  mt::backends::conv2d_backward_weight(kCpu, go, xw, p, gw);
  expect_values(gw, kTieExpected, 3, "conv2d_backward_weight");
  say_bf16_path();
  EXPECT_EQ(cpu::onednn_calls(), before + 6) << "not every call ran on oneDNN";
}

struct ConvCase {
  int64_t n, c, h, w, co, kh, kw;
  Conv2dParams p;
};

Conv2dParams params(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  Conv2dParams p;
  p.stride_h = sh, p.stride_w = sw, p.pad_h = ph, p.pad_w = pw, p.dilation_h = dh, p.dilation_w = dw, p.groups = groups;
  return p;
}

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d) { return (in + 2 * pad - d * (k - 1) - 1) / s + 1; }

Tensor in_layout(const Tensor& t, bool channels_last) {
  return channels_last ? t.contiguous(mt::MemoryFormat::ChannelsLast) : t.contiguous();
}

Tensor poisoned_in_layout(const mt::Shape& shape, mt::DType dt, bool channels_last) {
  Tensor t = Tensor::empty(shape, mt::TensorOptions(dt), channels_last ? mt::MemoryFormat::ChannelsLast : mt::MemoryFormat::Contiguous);
  poison(t);
  return t;
}

// The three kernels on oneDNN in `dt` against the same kernels in fp64 (the own kernels, which
// tests/ops/test_conv.cpp checks against direct loops) on the same values.
void check_conv(const ConvCase& k, mt::DType dt, bool channels_last, uint64_t seed, const std::string& what) {
  const int64_t ho = out_size(k.h, k.kh, k.p.stride_h, k.p.pad_h, k.p.dilation_h);
  const int64_t wo = out_size(k.w, k.kw, k.p.stride_w, k.p.pad_w, k.p.dilation_w);
  const Tensor x = in_layout(random_tensor({k.n, k.c, k.h, k.w}, dt, seed), channels_last);
  const Tensor w = in_layout(random_tensor({k.co, k.c / k.p.groups, k.kh, k.kw}, dt, seed + 1), channels_last);
  const Tensor bias = random_tensor({k.co}, dt, seed + 2);
  const Tensor go = in_layout(random_tensor({k.n, k.co, ho, wo}, dt, seed + 3), channels_last);
  auto f64 = [](const Tensor& t) { return t.to(mt::kFloat64); };
  const Tolerance tol = tolerance_for(dt);
  const int64_t before = cpu::onednn_calls();

  Tensor y = poisoned_in_layout({k.n, k.co, ho, wo}, dt, channels_last), y_ref = mt::empty({k.n, k.co, ho, wo}, mt::TensorOptions(mt::kFloat64));
  mt::backends::conv2d(kCpu, x, w, bias, k.p, y);
  mt::backends::conv2d(kCpu, f64(x), f64(w), f64(bias), k.p, y_ref);
  EXPECT_TRUE(all_close(y, y_ref, tol)) << what << ": forward";

  Tensor gx = poisoned_in_layout(x.shape(), dt, channels_last), gx_ref = mt::empty(x.shape(), mt::TensorOptions(mt::kFloat64));
  mt::backends::conv2d_backward_input(kCpu, go, w, k.p, gx);
  mt::backends::conv2d_backward_input(kCpu, f64(go), f64(w), k.p, gx_ref);
  EXPECT_TRUE(all_close(gx, gx_ref, tol)) << what << ": backward input";

  Tensor gw = poisoned_in_layout(w.shape(), dt, channels_last), gw_ref = mt::empty(w.shape(), mt::TensorOptions(mt::kFloat64));
  mt::backends::conv2d_backward_weight(kCpu, go, x, k.p, gw);
  mt::backends::conv2d_backward_weight(kCpu, f64(go), f64(x), k.p, gw_ref);
  EXPECT_TRUE(all_close(gw, gw_ref, tol)) << what << ": backward weight";
  if (dt == mt::kBFloat16) say_bf16_path();
  EXPECT_EQ(cpu::onednn_calls(), before + 3) << what << ": not every kernel ran on oneDNN";
}

TEST(CpuOneDnn, ConvolutionsMatchFp64InEveryDirectionAndLayout) {
  SKIP_WITHOUT_ONEDNN();
  OneDnnOverride all(cpu::OneDnnMode::All);
  const ConvCase cases[] = {
      {5, 4, 9, 7, 6, 3, 3, params(2, 1, 1, 2, 1, 2, 2)},  // everything at once; 5 samples: a shorter last unit
      {3, 16, 8, 8, 16, 3, 3, params(1, 1, 1, 1, 1, 1, 1)},
      {2, 3, 10, 10, 8, 5, 5, params(2, 2, 2, 2, 1, 1, 1)},  // few input channels, as in a first layer
      {2, 8, 6, 6, 8, 3, 3, params(1, 1, 1, 1, 1, 1, 8)},    // depthwise
      {3, 4, 6, 6, 4, 2, 2, params(3, 3, 0, 0, 1, 1, 1)},    // the stride skips the last row and column
      {1, 2, 5, 3, 2, 2, 3, params(1, 3, 0, 3, 1, 2, 1)},    // padding wider than the dilated kernel reaches
  };
  int index = 0;
  for (const ConvCase& k : cases) {
    for (mt::DType dt : {mt::kFloat32, mt::kBFloat16})
      for (bool channels_last : {false, true})
        check_conv(k, dt, channels_last, 40 + index,
                   "case " + std::to_string(index) + " " + mt::dtype_name(dt) + (channels_last ? " channels-last" : ""));
    ++index;
  }
}

TEST(CpuOneDnn, LargeSamplesSplitIntoUnitsSumTheWeightGradientOnce) {
  SKIP_WITHOUT_ONEDNN();
  OneDnnOverride all(cpu::OneDnnMode::All);
  // 8 MiB of fp32 activations per sample: units of at most two samples, several per thread.
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16})
    check_conv({5, 16, 256, 256, 16, 1, 1, params(1, 1, 0, 0, 1, 1, 1)}, dt, false, 70,
               std::string("large samples ") + mt::dtype_name(dt));
}

TEST(CpuOneDnn, Fp16AndFp64StayOnTheOwnKernels) {
  SKIP_WITHOUT_ONEDNN();
  OneDnnOverride all(cpu::OneDnnMode::All);
  const int64_t before = cpu::onednn_calls();
  for (mt::DType dt : {mt::kFloat16, mt::kFloat64}) {
    const Tensor a = random_tensor({33, 40}, dt, 1), b = random_tensor({40, 20}, dt, 2);
    Tensor out = poisoned({33, 20}, dt);
    mt::backends::gemm(kCpu, a, false, b, false, out, Tensor(), GemmEpilogue::None);
    EXPECT_TRUE(all_close(out, gemm_ref(a, false, b, false, Tensor(), false), tolerance_for(dt))) << mt::dtype_name(dt);
    Tensor y = poisoned({2, 4, 6, 6}, dt);
    mt::backends::conv2d(kCpu, random_tensor({2, 3, 8, 8}, dt, 3), random_tensor({4, 3, 3, 3}, dt, 4), Tensor(),
                         Conv2dParams(), y);
    EXPECT_TRUE(all_finite(y)) << mt::dtype_name(dt);
  }
  EXPECT_EQ(cpu::onednn_calls(), before) << "oneDNN 2.6 has no fp16 GEMM or convolution on this CPU, nor fp64";
}

// The environment's switch (ctest runs the backend tests with MIXTRAIN_ONEDNN=0, unset and all):
// which calls reach oneDNN, and the meta backend's model of it agrees.
TEST(CpuOneDnn, PathFollowsTheSwitchAndTheSizeThreshold) {
  const cpu::OneDnnMode mode = cpu::onednn_mode();
  std::printf("MIXTRAIN_ONEDNN mode here: %s\n",
              mode == cpu::OneDnnMode::Off ? "off" : mode == cpu::OneDnnMode::Sized ? "sized (default)" : "all");
  if (!cpu::onednn_built()) EXPECT_EQ(mode, cpu::OneDnnMode::Off);
  auto gemm_runs_onednn = [](int64_t size, mt::DType dt) {
    const Tensor a = random_tensor({size, size}, dt, 1), b = random_tensor({size, size}, dt, 2);
    Tensor out = poisoned({size, size}, dt);
    const int64_t before = cpu::onednn_calls();
    mt::backends::gemm(kCpu, a, false, b, true, out, Tensor(), GemmEpilogue::None);
    EXPECT_TRUE(all_finite(out));
    const bool ran = cpu::onednn_calls() > before;
    const Tensor ma = a.to(mt::Device::meta()), mb = b.to(mt::Device::meta()), mo = out.to(mt::Device::meta());
    EXPECT_EQ(cpu::onednn_takes_gemm(ma, false, mb, true, mo, Tensor(), GemmEpilogue::None), ran)
        << "the meta backend's model of the choice, size " << size;
    return ran;
  };
  auto conv_runs_onednn = [](int64_t channels) {
    Tensor y = poisoned({2, channels, 16, 16}, mt::kFloat32);
    const int64_t before = cpu::onednn_calls();
    Conv2dParams p;
    p.pad_h = p.pad_w = 1;
    mt::backends::conv2d(kCpu, random_tensor({2, channels, 16, 16}, mt::kFloat32, 3),
                         random_tensor({channels, channels, 3, 3}, mt::kFloat32, 4), Tensor(), p, y);
    EXPECT_TRUE(all_finite(y));
    return cpu::onednn_calls() > before;
  };
  static_assert(int64_t{256} * 256 * 256 >= cpu::kOneDnnGemmMinMacsBf16 && int64_t{4} * 4 * 4 < cpu::kOneDnnGemmMinMacsBf16);
  static_assert(int64_t{256} * 256 * 256 >= cpu::kOneDnnGemmMinMacsFp32 && int64_t{4} * 4 * 4 < cpu::kOneDnnGemmMinMacsFp32);
  static_assert(int64_t{2} * 32 * 256 * 32 * 9 >= cpu::kOneDnnConvMinMacs && int64_t{2} * 2 * 256 * 2 * 9 < cpu::kOneDnnConvMinMacs);
  say_bf16_path();
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16}) {
    EXPECT_EQ(gemm_runs_onednn(256, dt), mode != cpu::OneDnnMode::Off) << mt::dtype_name(dt);
    EXPECT_EQ(gemm_runs_onednn(4, dt), mode == cpu::OneDnnMode::All) << mt::dtype_name(dt);
  }
  EXPECT_EQ(conv_runs_onednn(32), mode != cpu::OneDnnMode::Off);
  EXPECT_EQ(conv_runs_onednn(2), mode == cpu::OneDnnMode::All);
}

TEST(CpuOneDnn, ModeAndVerboseSettingsParse) {
  EXPECT_EQ(cpu::parse_onednn_mode(nullptr), cpu::OneDnnMode::Sized);
  EXPECT_EQ(cpu::parse_onednn_mode("1"), cpu::OneDnnMode::Sized);
  EXPECT_EQ(cpu::parse_onednn_mode("0"), cpu::OneDnnMode::Off);
  EXPECT_EQ(cpu::parse_onednn_mode("all"), cpu::OneDnnMode::All);
  expect_error([] { cpu::parse_onednn_mode("yes"); }, "MIXTRAIN_ONEDNN must be 0");
  expect_error([] { cpu::set_onednn_override(3); }, "set_onednn_override: expected -1");
  EXPECT_FALSE(cpu::parse_cpu_verbose(nullptr));
  EXPECT_FALSE(cpu::parse_cpu_verbose("0"));
  EXPECT_TRUE(cpu::parse_cpu_verbose("1"));
  expect_error([] { cpu::parse_cpu_verbose("2"); }, "MIXTRAIN_CPU_VERBOSE must be 0 or 1");
}

// What a step computes with the work cut into parts: a GEMM cut into column blocks, a batched
// one cut by batch entries, and a weight gradient summed per run of samples.
std::vector<Tensor> parted_results() {
  const Tensor a = random_tensor({300, 700}, mt::kBFloat16, 1), b = random_tensor({700, 520}, mt::kBFloat16, 2);
  Tensor out = mt::empty({300, 520}, mt::TensorOptions(mt::kBFloat16)), batched = mt::empty({6, 300, 300}, mt::TensorOptions(mt::kFloat32));
  mt::backends::gemm(kCpu, a, false, b, false, out, Tensor(), GemmEpilogue::None);
  const Tensor ba = random_tensor({6, 300, 40}, mt::kFloat32, 3);
  mt::backends::gemm(kCpu, ba, false, ba, true, batched, Tensor(), GemmEpilogue::None);
  const Tensor x = random_tensor({6, 8, 20, 20}, mt::kFloat32, 4), go = random_tensor({6, 8, 20, 20}, mt::kFloat32, 5);
  Tensor gw = mt::empty({8, 8, 3, 3}, mt::TensorOptions(mt::kFloat32));
  Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  mt::backends::conv2d_backward_weight(kCpu, go, x, p, gw);
  return {out, batched, gw};
}

void expect_same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(bytes_of(a[i]), bytes_of(b[i])) << what << ", result " << i;
}

TEST(CpuOneDnn, ResultsDoNotDependOnTheGovernor) {
  SKIP_WITHOUT_ONEDNN();
  OneDnnOverride all(cpu::OneDnnMode::All);
  cpu::ThreadGovernor& g = cpu::governor();
  if (!g.adaptive())
    GTEST_SKIP() << "the thread count is fixed at " << g.full()
                 << " here (OMP_NUM_THREADS set, MIXTRAIN_CPU_ADAPTIVE=0 or a single CPU): there is no serial spell";
  const std::vector<Tensor> parallel = parted_results();
  g.hold_serial(cpu::now_ns() + int64_t{3'600'000'000'000});
  const std::vector<Tensor> serial = parted_results();
  g.hold_serial(0);
  expect_same_bits(parallel, serial, "one thread throughout");
}

// oneDNN's OpenMP runtime runs a primitive on one thread inside a parallel region; planned for
// more, it would compute the first thread's share only (engine.h). Each of the threads here runs
// whole products, which must come out complete and identical to the ones made outside.
TEST(CpuOneDnn, CallsInsideAParallelRegionComputeEverything) {
  SKIP_WITHOUT_ONEDNN();
  OneDnnOverride all(cpu::OneDnnMode::All);
  const std::vector<Tensor> outside = parted_results();
  std::vector<std::vector<Tensor>> inside(2);
#pragma omp parallel num_threads(2)
  {
    const int t = omp_get_thread_num();
    if (t < 2) inside[static_cast<size_t>(t)] = parted_results();
  }
  for (const std::vector<Tensor>& r : inside) {
    if (r.empty()) continue;  // a team of one (nested OpenMP off and inside a region already)
    expect_same_bits(outside, r, "inside a parallel region");
  }
}

}  // namespace
