// The vector unary kernels (kernels/cpu/unary_vector.h): every copy this CPU runs (generic,
// AVX2, AVX-512) against fp64 GELU and its derivative on random inputs over the whole fp32 range
// that matters and on the special values, odd lengths (vector tails), into poisoned outputs; and
// the op on fp32/bf16 tensors, contiguous (the vector kernel) and strided (the scalar formula),
// agreeing.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/unary_vector.h"
#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace cpu = mixtrain::backends::cpu;
using namespace mixtrain::testing;

namespace {

double gelu_ref(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_grad_ref(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

// fp32 arithmetic on 1 + erf loses what is below 2^-24 of 1, so the bound has an absolute part
// proportional to |x| next to the relative one.
bool close(float got, double want, double x) {
  return std::abs(got - want) <= 1e-5 * std::abs(want) + 6e-7 * std::max(1.0, std::abs(x));
}

std::vector<float> inputs(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> wide(-12.0f, 12.0f), narrow(-3.0f, 3.0f);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = (i % 3 == 0) ? wide(rng) : narrow(rng);
  const float specials[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 4.0f, -4.0f, 5.657f, -5.657f, 13.0f, -13.0f, 1e30f, -1e30f};
  for (size_t i = 0; i < sizeof specials / sizeof *specials && i < x.size(); ++i) x[i * 7 % n] = specials[i];
  return x;
}

TEST(CpuUnaryVector, EveryCopyMatchesFp64Gelu) {
  const auto copies = cpu::unary_vector_copies();
  ASSERT_FALSE(copies.empty());
  for (const auto& copy : copies) {
    for (int64_t n : {1, 7, 16, 33, 1001}) {
      const std::vector<float> x = inputs(n, 17 + n);
      std::vector<float> g(n), y(n, std::numeric_limits<float>::quiet_NaN()), gx(n, std::numeric_limits<float>::quiet_NaN());
      std::mt19937_64 rng(5);
      std::uniform_real_distribution<float> gd(-2.0f, 2.0f);
      for (auto& v : g) v = gd(rng);
      copy.gelu_forward(y.data(), n, x.data());
      copy.gelu_backward(gx.data(), n, x.data(), g.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(close(y[i], gelu_ref(x[i]), x[i]))
            << copy.isa << " gelu(" << x[i] << ") = " << y[i] << ", fp64 " << gelu_ref(x[i]) << " (n " << n << ")";
        ASSERT_TRUE(close(gx[i], g[i] * gelu_grad_ref(x[i]), x[i] * std::abs(g[i])))
            << copy.isa << " gelu'(" << x[i] << ") * " << g[i] << " = " << gx[i] << ", fp64 "
            << g[i] * gelu_grad_ref(x[i]) << " (n " << n << ")";
      }
    }
  }
}

TEST(CpuUnaryVector, EveryCopyKeepsNanAndInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const auto& copy : cpu::unary_vector_copies()) {
    const std::vector<float> x{nan, inf, 1.0f, -nan, 0.5f};
    const std::vector<float> g(x.size(), 1.0f);
    std::vector<float> y(x.size(), 0.0f), gx(x.size(), 0.0f);
    copy.gelu_forward(y.data(), static_cast<int64_t>(x.size()), x.data());
    copy.gelu_backward(gx.data(), static_cast<int64_t>(x.size()), x.data(), g.data());
    EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[3])) << copy.isa << ": NaN in, NaN out";
    EXPECT_TRUE(std::isnan(gx[0]) && std::isnan(gx[3])) << copy.isa << ": NaN in, NaN gradient";
    EXPECT_EQ(y[1], inf) << copy.isa;
  }
}

// The op: a contiguous tensor takes the vector kernel, every other column of one (stride 2) the
// scalar formula of elementwise_math.h; both within the dtype's tolerance of fp64, forward and
// backward.
TEST(CpuUnaryVector, GeluOpContiguousAndStridedAgreeWithFp64) {
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16, mt::kFloat16}) {
    for (bool strided : {false, true}) {
      mt::Tensor leaf = random_tensor({37, 58}, mt::kFloat64, 3, -6.0, 6.0).to(dt).requires_grad_(true);
      mt::Tensor x = strided ? leaf.slice(1, 0, 58, 2) : leaf;
      mt::Tensor y = mt::gelu(x);
      mt::Tensor g = random_tensor(y.shape(), mt::kFloat64, 9).to(dt);
      y.backward(g);
      mt::Tensor xr = x.detach().to(mt::kFloat64).requires_grad_(true);
      mt::Tensor yr = mt::gelu(xr);
      yr.backward(g.to(mt::kFloat64));
      mt::Tensor grad = strided ? leaf.grad().slice(1, 0, 58, 2) : leaf.grad();
      const char* how = strided ? " strided" : " contiguous";
      EXPECT_TRUE(all_close(y, yr.detach(), tolerance_for(dt))) << mt::dtype_name(dt) << how;
      EXPECT_TRUE(all_close(grad, xr.grad(), tolerance_for(dt))) << mt::dtype_name(dt) << how;
    }
  }
}

}  // namespace
