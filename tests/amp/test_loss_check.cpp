// GradScaler::check_loss: a non-finite loss stops training where loss scaling cannot help (no
// scale: fp32/bf16; the scale at its floor; or inf/NaN losses on nonfinite_loss_limit steps in a
// row, a forward that overflows) and is left to the scaler where it can.
#include <cmath>
#include <limits>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace amp = mixtrain::amp;
using mt::testing::expect_error;

TEST(LossCheck, WithoutAScaleANonFiniteLossIsAnErrorNamingTheStep) {
  amp::GradScaler disabled(amp::GradScalerOptions().enabled(false));
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
  amp::GradScaler at_floor(amp::GradScalerOptions().init_scale(amp::kScaleFloor));
  expect_error([&] { at_floor.check_loss(std::nan(""), 144); }, {"step 144", "floor"});
  at_floor.check_loss(1.0, 144);
  // A floor the caller set (not exactly representable in fp32) counts as well.
  amp::GradScaler own_floor(amp::GradScalerOptions().init_scale(0.1).min_scale(0.1));
  expect_error([&] { own_floor.check_loss(-INFINITY, 2); }, {"step 2", "floor"});
}

// `mixtrain train --precision fp16 --lr 1e30` once skipped ~142 steps of NaN losses (the forward
// overflowing with finite, huge weights) before the floor stopped it: a scale cannot mend a
// forward, so ten such losses in a row end the run; fewer, or a finite one between, do not.
TEST(LossCheck, NonFiniteLossesInARowEndTheRunAtTheLimit) {
  amp::GradScaler scaler;  // 65536: far from the floor
  for (int64_t step = 1; step <= 9; ++step) scaler.check_loss(step % 2 ? std::nan("") : INFINITY, step);
  scaler.check_loss(0.5, 10);  // a finite loss starts the count again
  for (int64_t step = 11; step <= 19; ++step) scaler.check_loss(std::nan(""), step);
  expect_error([&] { scaler.check_loss(std::nan(""), 20); },
               {"step 20", "10 in a row", "since step 11", "multiplies only the backward", "--lr", "bf16"});
  amp::GradScaler strict(amp::GradScalerOptions().nonfinite_loss_limit(1));
  strict.check_loss(3.0, 1);
  expect_error([&] { strict.check_loss(-INFINITY, 2); }, {"step 2", "since step 2 (1 in a row", "-inf"});
  expect_error([&] { amp::GradScaler(amp::GradScalerOptions().nonfinite_loss_limit(0)); },
               {"nonfinite_loss_limit must be at least 1, got 0"});
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
