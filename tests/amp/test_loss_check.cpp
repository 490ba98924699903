// GradScaler::check_loss: a non-finite loss stops training where loss scaling cannot help (no
// scale: fp32/bf16; or the scale at its floor) and is left to the scaler where it can.
#include <cmath>
#include <limits>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace amp = mixtrain::amp;
using mt::testing::expect_error;

TEST(LossCheck, WithoutAScaleANonFiniteLossIsAnErrorNamingTheStep) {
  const amp::GradScaler disabled(amp::GradScalerOptions().enabled(false));
  disabled.check_loss(2.5, 1);
  disabled.check_loss(-1e300, 1);
  expect_error([&] { disabled.check_loss(std::nan(""), 7); }, {"step 7", "NaN", "disabled"});
  expect_error([&] { disabled.check_loss(INFINITY, 12); }, {"step 12", "inf"});
}

TEST(LossCheck, WithAScaleLeftToLowerTheScalerDecides) {
  amp::GradScaler scaler;  // 65536: a NaN loss is a skipped step and a backoff
  scaler.check_loss(std::nan(""), 3);
  scaler.check_loss(INFINITY, 3);
  // At the floor the scaler has nothing left to try.
  const amp::GradScaler at_floor(amp::GradScalerOptions().init_scale(amp::kScaleFloor));
  expect_error([&] { at_floor.check_loss(std::nan(""), 144); }, {"step 144", "floor"});
  at_floor.check_loss(1.0, 144);
  // A floor the caller set (not exactly representable in fp32) counts as well.
  const amp::GradScaler own_floor(amp::GradScalerOptions().init_scale(0.1).min_scale(0.1));
  expect_error([&] { own_floor.check_loss(-INFINITY, 2); }, {"step 2", "floor"});
}

// The loop itself: an fp32 run whose learning rate makes the weights overflow stops with the
// step named instead of finishing on NaN (`mixtrain train --lr 1e308` trained on and exited 0).
TEST(LossCheck, ScaledTrainingRecoversFromOneBadStep) {
  mt::Tensor w = mt::ones({3}).requires_grad_(true);
  mt::optim::SGD opt({w}, mt::optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024.0));
  for (int64_t step = 1; step <= 3; ++step) {
    opt.zero_grad();
    const mt::Tensor loss = step == 2 ? (w * INFINITY).sum() : w.sum();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    scaler.check_loss(loss.item<double>(), step);  // step 2's inf loss is skipped, not fatal
  }
  for (float v : w.to_vector<float>()) EXPECT_FLOAT_EQ(v, 0.8f);
}
