// A small MLP (linear, relu, linear, mse_loss) trained with plain SGD in fp32 and under autocast
// fp16 and bf16 on the CPU, from the same seed: the autocast runs must track the fp32 run.
#include <cmath>

#include "amp_test_util.h"

namespace mixtrain::amp_test {
namespace {

namespace F = nn::functional;

struct Mlp {
  Tensor w1, b1, w2, b2;
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
  Tensor forward(const Tensor& x) const { return linear(relu(linear(x, w1, b1)), w2, b2); }
};

Tensor param(const Shape& shape, double scale) {
  Tensor p = (randn(shape) * scale).detach();
  p.set_requires_grad(true);
  return p;
}

struct Data {
  Tensor x, y;
};

// Regression onto a fixed random teacher network, so the loss can go well below its start.
Data make_data(uint64_t seed) {
  manual_seed(seed);
  Tensor x = randn({128, 8});
  const Tensor a = randn({8, 16}) * (1.0 / std::sqrt(8.0)), b = randn({16, 1}) * (1.0 / std::sqrt(16.0));
  return {x, matmul(tanh(matmul(x, a)), b)};
}

Mlp make_mlp(uint64_t seed) {
  manual_seed(seed);
  return {param({32, 8}, 1.0 / std::sqrt(8.0)), param({32}, 0.1), param({1, 32}, 1.0 / std::sqrt(32.0)),
          param({1}, 0.1)};
}

double eval_loss(const Mlp& m, const Data& d) {
  NoGradGuard no_grad;
  return F::mse_loss(m.forward(d.x), d.y).item<float>();
}

// Trains in place; precision kFloat32 means no autocast. Returns the fp32 loss after training.
double train(Mlp& m, const Data& d, DType precision, int steps, double lr) {
  for (int step = 0; step < steps; ++step) {
    for (Tensor& p : m.params()) p.set_grad(Tensor());
    Tensor loss;
    {
      amp::AutocastGuard autocast(DeviceType::CPU, precision == kFloat32 ? kFloat16 : precision,
                                  /*enabled=*/precision != kFloat32);
      loss = F::mse_loss(m.forward(d.x), d.y);
    }
    EXPECT_EQ(loss.dtype(), kFloat32);
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor& p : m.params()) {
      if (step == 0) EXPECT_EQ(p.grad().dtype(), kFloat32);
      p.add_(p.grad(), -lr);
    }
  }
  return eval_loss(m, d);
}

TEST(AutocastConvergence, Fp16AndBf16TrackFp32) {
  constexpr int kSteps = 300;
  constexpr double kLr = 0.1;
  const Data data = make_data(21);
  Mlp ref = make_mlp(22);
  const double initial = eval_loss(ref, data);
  const double fp32 = train(ref, data, kFloat32, kSteps, kLr);
  // The run must actually learn, or "close to fp32" means nothing.
  ASSERT_LT(fp32, 0.2 * initial) << "initial " << initial << ", after training " << fp32;
  // Half precision rounds the products (fp16: 11-bit, bf16: 8-bit significand); over a few hundred
  // SGD steps that moves the trajectory a little, not the loss it reaches: the issue asks for
  // "within a few percent". bf16's coarser rounding gets the wider margin.
  for (auto [low, tol] : {std::pair{kFloat16, 0.03}, std::pair{kBFloat16, 0.05}}) {
    Mlp m = make_mlp(22);
    amp::reset_autocast_stats();
    const double loss = train(m, data, low, kSteps, kLr);
    // ... and the run really computed its products in half precision.
    EXPECT_EQ(amp::autocast_stats().ops_of(low, amp::CastPolicy::LowerPrecision), 2u * kSteps);
    EXPECT_NEAR(loss / fp32, 1.0, tol) << dtype_name(low) << ": loss " << loss << " vs fp32 " << fp32
                                       << " (initial " << initial << ")";
    std::printf("[ info ] %s: loss %.6f, fp32 %.6f, initial %.6f\n", dtype_name(low), loss, fp32, initial);
  }
}

}  // namespace
}  // namespace mixtrain::amp_test
