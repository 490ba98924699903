// The bf16 matrix product on vdpbf16ps (kernels/cpu/gemm_bf16.h): the kernel against an
// fp64 reference on odd shapes, both layouts of each operand, accumulate, into poisoned outputs;
// matmul and conv2d with the kernel forced on and off (the fp32 path) agreeing within bf16
// tolerance and reaching the kernel. Skipped, saying why, on CPUs without AVX512_BF16.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/gemm_bf16.h"
#include "backends/cpu/onednn/onednn.h"
#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace cpu = mixtrain::backends::cpu;
using namespace mixtrain::testing;

namespace {

// Restores the detected choice when a test ends, passed or not. oneDNN is off meanwhile: these
// tests are about the own kernel (oneDNN's have test_cpu_onednn.cpp).
struct Bf16Override {
  explicit Bf16Override(int mode) {
    cpu::set_bf16_gemm_override(mode);
    cpu::set_onednn_override(static_cast<int>(cpu::OneDnnMode::Off));
  }
  ~Bf16Override() {
    cpu::set_bf16_gemm_override(-1);
    cpu::set_onednn_override(-1);
  }
};

#define SKIP_WITHOUT_BF16()                                                                              \
  if (!cpu::bf16_gemm_enabled())                                                                         \
  GTEST_SKIP() << "the bf16 kernel is off here (no AVX512_BF16, not built, MIXTRAIN_CPU_ISA or "        \
                  "MIXTRAIN_CPU_BF16_GEMM=0)"

// A [rows, cols] matrix of bf16 values stored row-major, or column-major when `col_major`.
struct Operand {
  int64_t rows, cols;
  bool col_major;
  std::vector<uint16_t> bits;
  std::vector<float> values;  // the same numbers as fp32
  double at(int64_t r, int64_t c) const { return values[static_cast<size_t>(index(r, c))]; }
  int64_t index(int64_t r, int64_t c) const { return col_major ? c * rows + r : r * cols + c; }
  template <class S>
  cpu::GemmMatrix<S> matrix(const std::vector<S>& data) const {
    return col_major ? cpu::GemmMatrix<S>{data.data(), rows, cols, 1, rows}
                     : cpu::GemmMatrix<S>{data.data(), rows, cols, cols, 1};
  }
};

Operand random_operand(int64_t rows, int64_t cols, bool col_major, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Operand o{rows, cols, col_major, {}, {}};
  for (int64_t i = 0; i < rows * cols; ++i) {
    const mt::BFloat16 b(u(rng));
    o.bits.push_back(b.bits);
    o.values.push_back(static_cast<float>(b));
  }
  return o;
}

// Products of bf16 values are exact in fp32; only the fp32 sums round, so the error bound is
// fp32's relative to the sum of |a * b|, a bound that a wrong pairing or tile would break.
void expect_product(const Operand& a, const Operand& b, const std::vector<float>& out, int64_t ldc,
                    const std::vector<float>& before, bool accumulate, const char* what) {
  const int64_t m = a.rows, n = b.cols, k = a.cols;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < ldc; ++c) {
      const float got = out[static_cast<size_t>(r * ldc + c)];
      if (c >= n) {  // outside the product: untouched
        ASSERT_TRUE(std::isnan(got)) << what << " wrote the padding at " << r << "," << c;
        continue;
      }
      double ref = accumulate ? before[static_cast<size_t>(r * ldc + c)] : 0.0, mag = std::fabs(ref);
      for (int64_t i = 0; i < k; ++i) {
        ref += a.at(r, i) * b.at(i, c);
        mag += std::fabs(a.at(r, i) * b.at(i, c));
      }
      ASSERT_NEAR(got, ref, 2e-6 * (mag + 1.0))
          << what << " m=" << m << " n=" << n << " k=" << k << " at " << r << "," << c;
    }
  }
}

TEST(CpuGemmBf16, KernelMatchesFp64OnOddShapesLayoutsAndAccumulate) {
  SKIP_WITHOUT_BF16();
  std::mt19937 rng(18);
  const int64_t sizes[] = {1, 7, 33, 129};
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : sizes)
        for (int layout = 0; layout < 4; ++layout) {
          const Operand a = random_operand(m, k, layout & 1, rng), b = random_operand(k, n, layout & 2, rng);
          const bool accumulate = (m + n + k + layout) % 2 == 0;
          const int64_t ldc = n + 3;
          std::vector<float> before(static_cast<size_t>(m * ldc), std::numeric_limits<float>::quiet_NaN());
          for (int64_t r = 0; r < m; ++r)
            for (int64_t c = 0; c < n; ++c)
              before[static_cast<size_t>(r * ldc + c)] =
                  accumulate ? std::uniform_real_distribution<float>(-1, 1)(rng) : std::nanf("");
          std::vector<float> out = before, out32 = before;
          cpu::gemm_bf16_product(cpu::GemmBf16Call<uint16_t>{a.matrix(a.bits), b.matrix(b.bits), out.data(), ldc, accumulate});
          expect_product(a, b, out, ldc, before, accumulate, "bits");
          // fp32 operands holding bf16 values pack to the same words: bit-identical results.
          cpu::gemm_bf16_product(
              cpu::GemmBf16Call<float>{a.matrix(a.values), b.matrix(b.values), out32.data(), ldc, accumulate});
          for (size_t i = 0; i < out.size(); ++i)
            if (!std::isnan(out[i])) ASSERT_EQ(out[i], out32[i]) << "fp32-held operands differ at " << i;
          if (HasFatalFailure()) return;
        }
}

// A row of A and a column of B read with strides that are not 1 (a row of a column-major
// matrix, a column of a row-major one): the packers' general path.
TEST(CpuGemmBf16, StridedVectorsMatchFp64) {
  SKIP_WITHOUT_BF16();
  std::mt19937 rng(5);
  for (int64_t k : {1, 8, 33}) {
    const Operand wide_a = random_operand(3, k, true, rng), wide_b = random_operand(k, 5, false, rng);
    std::vector<float> out(1, std::nanf(""));
    const cpu::GemmMatrix<uint16_t> a{wide_a.bits.data() + 1, 1, k, 7, 3};  // row 1 of a col-major 3 x k
    const cpu::GemmMatrix<uint16_t> b{wide_b.bits.data() + 2, k, 1, 5, 9};  // column 2 of a row-major k x 5
    cpu::gemm_bf16_product(cpu::GemmBf16Call<uint16_t>{a, b, out.data(), 1, false});
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < k; ++i) {
      ref += wide_a.at(1, i) * wide_b.at(i, 2);
      mag += std::fabs(wide_a.at(1, i) * wide_b.at(i, 2));
    }
    EXPECT_NEAR(out[0], ref, 2e-6 * (mag + 1.0)) << "k=" << k;
  }
}

TEST(CpuGemmBf16, EmptyDepthWritesZerosOrKeepsTheSum) {
  SKIP_WITHOUT_BF16();
  std::vector<uint16_t> none;
  std::vector<float> out(6, std::nanf(""));
  cpu::gemm_bf16_product(cpu::GemmBf16Call<uint16_t>{{none.data(), 2, 0, 0, 1}, {none.data(), 0, 3, 3, 1}, out.data(), 3, false});
  for (float v : out) EXPECT_EQ(v, 0.0f);
  out.assign(6, 2.5f);
  cpu::gemm_bf16_product(cpu::GemmBf16Call<uint16_t>{{none.data(), 2, 0, 0, 1}, {none.data(), 0, 3, 3, 1}, out.data(), 3, true});
  for (float v : out) EXPECT_EQ(v, 2.5f);
}

// The result of fn with the kernel forced on and off, and the kernel calls the first made.
template <class F>
void on_and_off(F&& fn, std::vector<mt::Tensor>& on, std::vector<mt::Tensor>& off, int64_t& calls) {
  {
    Bf16Override force(1);
    const int64_t before = cpu::gemm_bf16_calls();
    on = fn();
    calls = cpu::gemm_bf16_calls() - before;
  }
  Bf16Override force(0);
  const int64_t before = cpu::gemm_bf16_calls();
  off = fn();
  EXPECT_EQ(cpu::gemm_bf16_calls(), before) << "the fallback still reached the bf16 kernel";
}

TEST(CpuGemmBf16, MatmulAgreesWithTheFp32PathAndFp64) {
  SKIP_WITHOUT_BF16();
  const Tolerance tol = tolerance_for(mt::kBFloat16);
  for (int64_t m : {1, 33, 129})
    for (int64_t k : {7, 129})
      for (bool trans : {false, true}) {
        const mt::Tensor a = random_tensor({m, k}, mt::kBFloat16, 100 + m + k);
        mt::Tensor b = random_tensor({trans ? 65 : k, trans ? k : 65}, mt::kBFloat16, 200 + m + k);
        if (trans) b = b.transpose(0, 1);  // a strided operand: the GemmMatrix column stride
        std::vector<mt::Tensor> on, off;
        int64_t calls = 0;
        on_and_off([&] { return std::vector<mt::Tensor>{mt::matmul(a, b)}; }, on, off, calls);
        EXPECT_GE(calls, 1) << "matmul did not reach the bf16 kernel";
        const mt::Tensor ref = mt::matmul(a.to(mt::kFloat64), b.to(mt::kFloat64));
        EXPECT_TRUE(all_close(on[0], ref, tol)) << "kernel vs fp64, m=" << m << " k=" << k;
        EXPECT_TRUE(all_close(on[0], off[0].to(mt::kFloat64), tol)) << "kernel vs fp32 path, m=" << m << " k=" << k;
      }
}

TEST(CpuGemmBf16, BatchedMatmulReachesTheKernel) {
  SKIP_WITHOUT_BF16();
  const mt::Tensor a = random_tensor({3, 17, 40}, mt::kBFloat16, 7), b = random_tensor({3, 40, 9}, mt::kBFloat16, 8);
  std::vector<mt::Tensor> on, off;
  int64_t calls = 0;
  on_and_off([&] { return std::vector<mt::Tensor>{mt::matmul(a, b)}; }, on, off, calls);
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(all_close(on[0], mt::matmul(a.to(mt::kFloat64), b.to(mt::kFloat64)), tolerance_for(mt::kBFloat16)));
}

TEST(CpuGemmBf16, Conv2dForwardAndBackwardGoThroughTheKernel) {
  SKIP_WITHOUT_BF16();
  const Tolerance tol = tolerance_for(mt::kBFloat16);
  const mt::Tensor x = random_tensor({2, 5, 9, 11}, mt::kBFloat16, 31);
  const mt::Tensor w = random_tensor({6, 5, 3, 3}, mt::kBFloat16, 32);
  auto run = [&] {
    mt::Tensor xv = x.detach().requires_grad_(true), wv = w.detach().requires_grad_(true);
    mt::Tensor y = mt::nn::functional::conv2d(xv, wv, mt::Tensor(), 1, 1);
    y.sum().backward();
    return std::vector<mt::Tensor>{y.detach(), xv.grad(), wv.grad()};
  };
  std::vector<mt::Tensor> on, off;
  int64_t calls = 0;
  on_and_off(run, on, off, calls);
  EXPECT_GE(calls, 3) << "conv2d forward, input and weight gradients did not all reach the bf16 kernel";
  const char* names[] = {"output", "grad_x", "grad_w"};
  for (size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(all_close(on[i], off[i].to(mt::kFloat64), tol)) << names[i] << ": kernel vs fp32 path";
}

}  // namespace
