// Schedulers never hand the optimizer a rate that is not a finite number, and their epoch never
// wraps: a rate that overflows is an Error naming the scheduler, the epoch and the value, raised
// where it is computed (on step or on load) with nothing applied.
#include <cmath>
#include <limits>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace optim = mixtrain::optim;
using mt::testing::expect_error;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

struct Rig {
  mt::Tensor w = mt::ones({4}).requires_grad_(true);
  optim::AdamW opt{{w}, optim::AdamWOptions().lr(1e-3)};
  double lr() { return opt.param_groups()[0].options().get_lr(); }
  // One AdamW step with a unit gradient: the weights must stay finite.
  void train_step() {
    opt.zero_grad();
    w.sum().backward();
    opt.step();
    for (float v : w.to_vector<float>()) ASSERT_TRUE(std::isfinite(v)) << "lr " << lr();
  }
};

}  // namespace

TEST(SchedulerLimits, AnOverflowingRateOnLoadIsRefusedWithNothingApplied) {
  Rig s;
  optim::ExponentialLR sched(s.opt, 1.5);
  nlohmann::json state = sched.state_dict();
  state["last_epoch"] = 2000;  // 1.5^2000 overflows: the rate would be inf
  state["base_lrs"] = {2e-3};
  expect_error([&] { sched.load_state_dict(state); }, {"ExponentialLR", "epoch 2000", "inf"});
  EXPECT_EQ(sched.last_epoch(), 0);
  EXPECT_EQ(sched.base_lrs(), (std::vector<double>{1e-3}));
  EXPECT_EQ(s.lr(), 1e-3);
  s.train_step();
}

TEST(SchedulerLimits, AnOverflowingRateOnStepIsRefused) {
  Rig s;
  optim::StepLR sched(s.opt, 1, 1e300);
  sched.step(true);  // 1e-3 * 1e300: large, still finite
  EXPECT_EQ(s.lr(), 1e-3 * 1e300);
  expect_error([&] { sched.step(true); }, {"StepLR", "epoch 2", "inf"});
  EXPECT_EQ(sched.last_epoch(), 1);
  EXPECT_EQ(s.lr(), 1e-3 * 1e300);
  EXPECT_EQ(sched.get_last_lr(), (std::vector<double>{1e-3 * 1e300}));
  // A lambda's factor was already checked; the product with the base rate is now too.
  Rig t;
  optim::LambdaLR lambda(t.opt, [](int64_t e) { return e == 0 ? 1.0 : 1e308; });
  t.opt.param_groups()[0].options().set_lr(10.0);
  nlohmann::json st = lambda.state_dict();
  st["base_lrs"] = {10.0};
  st["last_epoch"] = 1;
  expect_error([&] { lambda.load_state_dict(st); }, {"LambdaLR", "epoch 1", "inf"});
}

TEST(SchedulerLimits, TheLastEpochIsNeverPassed) {
  Rig s;
  optim::CosineAnnealingLR sched(s.opt, 100);
  nlohmann::json state = sched.state_dict();
  state["last_epoch"] = kMax;
  sched.load_state_dict(state);
  EXPECT_EQ(sched.last_epoch(), kMax);
  const double lr = s.lr();
  EXPECT_TRUE(std::isfinite(lr));
  // step() once wrapped last_epoch to -2^63.
  expect_error([&] { sched.step(true); }, {"CosineAnnealingLR", "2^63"});
  EXPECT_EQ(sched.last_epoch(), kMax);
  EXPECT_EQ(s.lr(), lr);
  state["last_epoch"] = -1;
  expect_error([&] { sched.load_state_dict(state); }, "last_epoch");
}

TEST(SchedulerLimits, OneCycleRatesMustBeFiniteAtConstruction) {
  mt::Tensor w = mt::ones({2}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(0.1).momentum(0.9));
  // max_lr / div_factor overflows: refused before any rate or momentum is written.
  expect_error([&] { optim::OneCycleLR(opt, optim::OneCycleLROptions(1.0, 10).div_factor(1e-320)); },
               {"OneCycleLR", "inf"});
  expect_error([&] { optim::OneCycleLR(opt, optim::OneCycleLROptions(1.0, 10).max_momentum(INFINITY)); },
               {"OneCycleLR", "momentum"});
  EXPECT_EQ(opt.param_groups()[0].options().get_lr(), 0.1);
}

TEST(SchedulerLimits, ARateTheUpdateCannotHoldIsRefusedBeforeAnyWeightIsWritten) {
  Rig s;
  optim::StepLR sched(s.opt, 1, 1e300);
  sched.step(true);  // 1e-3 * 1e300: finite as a double, inf as the float32 the update computes in
  s.opt.zero_grad();
  s.w.sum().backward();
  // The optimizer once wrote -inf into the weights here, and only the schedule's next step failed.
  expect_error([&] { s.opt.step(); }, {"AdamW.step", "lr", "1e+297", "float32", "before any weight"});
  EXPECT_EQ(s.w.to_vector<float>(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(s.opt.steps_taken(), 0);
  EXPECT_TRUE(s.opt.state_tensors().empty()) << "no moment was created";
  // Gated (GradScaler's path) the same.
  expect_error([&] { s.opt.step(mt::zeros({})); }, {"AdamW.step", "lr"});
  EXPECT_EQ(s.w.to_vector<float>(), std::vector<float>(4, 1.0f));
  // A rate finite in float32 whose first step size lr / (1 - beta1) is not: refused too.
  s.opt.param_groups()[0].options().set_lr(3e38);
  expect_error([&] { s.opt.step(); }, {"AdamW.step", "1 - beta1", "3e+39"});
  EXPECT_EQ(s.w.to_vector<float>(), std::vector<float>(4, 1.0f));
  // An inf rate set by hand.
  s.opt.param_groups()[0].options().set_lr(INFINITY);
  expect_error([&] { s.opt.step(); }, {"AdamW.step", "lr", "inf"});
  // Back to a rate it can apply: the step is taken, the weights stay finite.
  s.opt.param_groups()[0].options().set_lr(1e-3);
  s.opt.step();
  for (float v : s.w.to_vector<float>()) EXPECT_TRUE(std::isfinite(v) && v < 1.0f);
}

TEST(SchedulerLimits, Float64WeightsTakeRatesPastFloat32) {
  // SGD on float64 weights computes in float64: 1e39 is a rate it can apply.
  mt::Tensor w = mt::ones({2}, mt::TensorOptions(mt::kFloat64)).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions(1e39));
  w.sum().backward();
  opt.step();
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{1.0 - 1e39, 1.0 - 1e39}));
  mt::Tensor f = mt::ones({2}).requires_grad_(true);
  optim::SGD single({f}, optim::SGDOptions(1e39));
  f.sum().backward();
  expect_error([&] { single.step(); }, {"SGD.step", "lr", "float32"});
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1.0f, 1.0f}));
}
