// End-to-end: fp16 training with the scaler and fp32 master weights.
//  - Master weights: on a linear regression whose updates are below half an fp16 ulp of the
//    weights, fp16 + master weights reaches the fp32 model's loss; fp16 without master weights
//    stalls because every update rounds away.
//  - An fp16 MLP whose gradients overflow (an oversized initial scale, a loss multiplied up):
//    the overflowing steps are skipped with the parameters bit-identical, and the scale settles.
#include <cstring>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::bytes_of;

namespace {

struct Regression {
  Tensor x, y, w_star;
};

// y = x w* + noise (sigma 0.1); |w*| in [2.5, 3.5], where an fp16 ulp is 2^-9.
Regression make_regression() {
  mt::Generator gen(2026);
  Regression r;
  r.x = mt::randn({256, 16}, gen);
  Tensor sign = mt::rand({16, 1}, gen) - 0.5;
  r.w_star = (sign / sign.abs()) * (mt::rand({16, 1}, gen) + 2.5);
  r.y = mt::matmul(r.x, r.w_star) + mt::randn({256, 1}, gen) * 0.1;
  return r;
}

// Starts 0.3..0.6 away from w* (towards zero): |w| stays in [1.9, 4.1].
Tensor initial_weights(const Regression& r) {
  mt::Generator gen(7);
  return r.w_star - (r.w_star / r.w_star.abs()) * (mt::rand({16, 1}, gen) * 0.3 + 0.3);
}

enum class Mode { Fp32, Fp16Master, Fp16NoMaster };

double train_regression(const Regression& r, Mode mode, int steps, double* initial_loss) {
  const mt::DType dt = mode == Mode::Fp32 ? mt::kFloat32 : mt::kFloat16;
  Tensor w = initial_weights(r).to(dt).detach().set_requires_grad(true);
  Tensor x = r.x.to(dt);
  // Adam's first steps move each weight by ~lr = 4e-4, below half an ulp (>= 4.9e-4) of |w|.
  mt::optim::Adam adam({w}, mt::optim::AdamOptions(4e-4).master_weights(mode == Mode::Fp16Master));
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().init_scale(1024).enabled(mode == Mode::Fp16Master));
  double loss_value = 0;
  for (int s = 0; s <= steps; ++s) {
    adam.zero_grad();
    Tensor loss = mt::nn::functional::mse_loss(mt::matmul(x, w).to(mt::kFloat32), r.y);
    loss_value = loss.item<float>();
    if (s == 0 && initial_loss) *initial_loss = loss_value;
    if (s == steps) break;
    scaler.scale(loss).backward();
    scaler.step(adam);
    scaler.update();
  }
  return loss_value;
}

}  // namespace

TEST(Training, MasterWeightsReachTheFloat32LossWithoutThemFp16Stalls) {
  const Regression r = make_regression();
  double initial = 0;
  const double fp32 = train_regression(r, Mode::Fp32, 3000, &initial);
  const double master = train_regression(r, Mode::Fp16Master, 3000, nullptr);
  const double stalled = train_regression(r, Mode::Fp16NoMaster, 3000, nullptr);
  std::printf("regression loss after 3000 Adam steps: initial %.4f, fp32 %.5f, fp16 + master %.5f, "
              "fp16 without master %.4f\n", initial, fp32, master, stalled);
  EXPECT_LT(fp32, 0.02);  // the noise floor is 0.01
  EXPECT_NEAR(master, fp32, 0.05 * fp32);
  EXPECT_GT(stalled, 0.5 * initial);  // the updates were rounded away
  EXPECT_GT(stalled, 20 * fp32);
}

TEST(Training, OverflowingStepsAreSkippedBitIdenticallyAndTheScaleSettles) {
  mt::Generator gen(5);
  std::vector<Tensor> params = {(mt::randn({32, 64}, gen) * 0.2).to(mt::kFloat16), mt::zeros({64}, mt::kFloat16),
                                (mt::randn({64, 1}, gen) * 0.2).to(mt::kFloat16), mt::zeros({1}, mt::kFloat16)};
  for (Tensor& p : params) p.set_requires_grad(true);
  mt::optim::AdamW opt(params, mt::optim::AdamWOptions(1e-3).master_weights(true));
  // 2^24 makes the first backward overflow in fp16; the scaler must back off on its own.
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().init_scale(1 << 24).growth_interval(25));
  int skipped_early = 0, skipped_late = 0;
  double lo = 1e30, hi = 0;
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    // Fresh batches of pure noise: the gradients stay the same size, so the scale can settle.
    Tensor x = mt::randn({64, 32}, gen).to(mt::kFloat16);
    Tensor y = mt::randn({64, 1}, gen);
    Tensor h = mt::relu(mt::matmul(x, params[0]) + params[1]);
    Tensor loss = mt::nn::functional::mse_loss((mt::matmul(h, params[2]) + params[3]).to(mt::kFloat32), y);
    if (step == 200) loss = loss * 1e6;  // a loss spike: its gradients overflow fp16
    scaler.scale(loss).backward();
    std::vector<std::vector<uint8_t>> before;
    for (const Tensor& p : params) before.push_back(bytes_of(p));
    std::vector<std::vector<uint8_t>> master_before;
    for (const Tensor& m : opt.master_params()) master_before.push_back(bytes_of(m));
    const bool stepped = scaler.step(opt);
    if (!stepped) {
      for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(bytes_of(params[i]), before[i]) << "step " << step;
      for (size_t i = 0; i < params.size(); ++i) EXPECT_EQ(bytes_of(opt.master_params()[i]), master_before[i]);
      (step < 20 ? skipped_early : skipped_late) += 1;
    }
    if (step == 200) EXPECT_FALSE(stepped);
    scaler.update();
    if (step >= 100) lo = std::min(lo, scaler.get_scale()), hi = std::max(hi, scaler.get_scale());
  }
  EXPECT_GE(skipped_early, 1);  // calibration from the oversized initial scale
  // Settled: a few skips where a growth step overshoots (and the spike), the scale within a
  // factor of 4 (one growth and one backoff either side) apart from the spike's backoff.
  EXPECT_LE(skipped_late, 12);
  EXPECT_LE(hi / lo, 8.0);
  EXPECT_EQ(opt.steps_skipped(), skipped_early + skipped_late);
  EXPECT_EQ(scaler.skipped_steps(), skipped_early + skipped_late);
}
