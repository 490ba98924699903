// LR schedulers against their closed forms (PyTorch's documented formulas), the skipped-step
// rule, scheduler state; clip_grad_norm_ against an fp64 reference.
#include <cmath>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;

namespace {
constexpr double kPi = 3.14159265358979323846;

std::unique_ptr<mt::optim::SGD> make_sgd(double lr) {
  Tensor p = mt::zeros({2}).set_requires_grad(true);
  return std::make_unique<mt::optim::SGD>(std::vector<Tensor>{p}, mt::optim::SGDOptions(lr).momentum(0.9));
}
double lr_of(const mt::optim::Optimizer& o) { return o.param_groups()[0].options().get_lr(); }
double momentum_of(const mt::optim::Optimizer& o) { return o.param_groups()[0].options().get_momentum(); }
}  // namespace

TEST(Schedulers, CosineAnnealingFollowsTheClosedForm) {
  auto opt = make_sgd(0.5);
  mt::optim::CosineAnnealingLR sched(*opt, 10, 0.01);
  EXPECT_DOUBLE_EQ(lr_of(*opt), 0.5);
  for (int t = 1; t <= 25; ++t) {
    sched.step();
    // eta_t = eta_min + (eta_max - eta_min) (1 + cos(pi t / T_max)) / 2 (torch docs)
    const double want = 0.01 + 0.49 * (1 + std::cos(kPi * t / 10.0)) / 2;
    EXPECT_NEAR(lr_of(*opt), want, 1e-15) << "t=" << t;
    EXPECT_EQ(sched.last_epoch(), t);
  }
  // Known points: half way, and the minimum at T_max.
  auto opt2 = make_sgd(1.0);
  mt::optim::CosineAnnealingLR s2(*opt2, 4);
  s2.step();
  s2.step();
  EXPECT_NEAR(lr_of(*opt2), 0.5, 1e-15);
  s2.step();
  s2.step();
  EXPECT_NEAR(lr_of(*opt2), 0.0, 1e-15);
}

TEST(Schedulers, OneCycleTwoPhaseCosine) {
  auto opt = make_sgd(123.0);  // OneCycleLR replaces the lr
  mt::optim::OneCycleLR sched(*opt, mt::optim::OneCycleLROptions(1.0, 100));
  // Step 0: max_lr / div_factor, momentum at max_momentum.
  EXPECT_NEAR(lr_of(*opt), 1.0 / 25, 1e-15);  // PyTorch gets 0.040000000000000036 from its cos formula too
  EXPECT_DOUBLE_EQ(momentum_of(*opt), 0.95);
  std::vector<double> lrs{lr_of(*opt)}, moms{momentum_of(*opt)};
  for (int t = 1; t < 100; ++t) {
    sched.step();
    lrs.push_back(lr_of(*opt));
    moms.push_back(momentum_of(*opt));
  }
  // Warm-up ends at step pct_start * total - 1 = 29 at max_lr; the last step is min_lr.
  EXPECT_NEAR(lrs[29], 1.0, 1e-12);
  EXPECT_NEAR(moms[29], 0.85, 1e-12);
  EXPECT_NEAR(lrs[99], 1.0 / 25 / 1e4, 1e-15);
  EXPECT_NEAR(moms[99], 0.95, 1e-12);
  // Cosine interpolation inside each phase: pct = (t - start) / (end - start).
  for (int t = 0; t < 100; ++t) {
    double start = 0, end = 29, a = 0.04, b = 1.0, ma = 0.95, mb = 0.85;
    if (t > 29) start = 29, end = 99, a = 1.0, b = 0.04 / 1e4, ma = 0.85, mb = 0.95;
    const double pct = (t - start) / (end - start);
    const double c = (1 + std::cos(kPi * pct)) / 2;
    EXPECT_NEAR(lrs[t], b + (a - b) * c, 1e-12) << t;
    EXPECT_NEAR(moms[t], mb + (ma - mb) * c, 1e-12) << t;
  }
  sched.step();  // step 100 == total_steps is still allowed, as in PyTorch
  EXPECT_THROW(sched.step(), mt::Error);
}

TEST(Schedulers, OneCycleThreePhaseLinearWithAdamBetas) {
  Tensor p = mt::zeros({2}).set_requires_grad(true);
  mt::optim::Adam adam({p}, mt::optim::AdamOptions());
  mt::optim::OneCycleLR sched(
      adam, mt::optim::OneCycleLROptions(0.1, 20).three_phase(true).anneal_strategy(mt::optim::AnnealStrategy::Linear));
  std::vector<double> lrs{lr_of(adam)};
  for (int t = 1; t < 20; ++t) {
    sched.step();
    lrs.push_back(lr_of(adam));
  }
  // Phases end at 5, 10 and 19: initial -> max -> initial -> min, linearly.
  const double init = 0.1 / 25, minlr = init / 1e4;
  EXPECT_NEAR(lrs[5], 0.1, 1e-15);
  EXPECT_NEAR(lrs[10], init, 1e-15);
  EXPECT_NEAR(lrs[19], minlr, 1e-15);
  EXPECT_NEAR(lrs[3], init + (0.1 - init) * 3 / 5, 1e-15);
  EXPECT_NEAR(lrs[7], 0.1 + (init - 0.1) * 2 / 5, 1e-15);
  EXPECT_NEAR(lrs[14], init + (minlr - init) * 4 / 9, 1e-15);
  const auto& o = static_cast<const mt::optim::AdamOptions&>(adam.param_groups()[0].options());
  EXPECT_DOUBLE_EQ(o.betas().first, 0.95);  // phase 3 keeps max_momentum
  EXPECT_DOUBLE_EQ(o.betas().second, 0.999);
}

TEST(Schedulers, SkippedStepsDoNotAdvanceUnlessAsked) {
  auto opt = make_sgd(1.0);
  mt::optim::CosineAnnealingLR sched(*opt, 10);
  opt->mark_step_skipped();  // what GradScaler::step does on inf/NaN gradients
  sched.step();
  EXPECT_EQ(sched.last_epoch(), 0);
  EXPECT_DOUBLE_EQ(lr_of(*opt), 1.0);
  sched.step(false);
  EXPECT_EQ(sched.last_epoch(), 0);
  sched.step(true);  // asked: advance anyway (PyTorch's behaviour)
  EXPECT_EQ(sched.last_epoch(), 1);
  opt->param_groups()[0].params()[0].set_grad(mt::zeros({2}));
  opt->step();  // a real step clears the flag
  EXPECT_FALSE(opt->last_step_skipped());
  sched.step();
  EXPECT_EQ(sched.last_epoch(), 2);
  EXPECT_EQ(opt->steps_skipped(), 1);
}

TEST(Schedulers, StateDictRestoresTheEpoch) {
  auto a = make_sgd(0.3);
  mt::optim::CosineAnnealingLR sa(*a, 8, 0.001);
  for (int i = 0; i < 5; ++i) sa.step();
  auto b = make_sgd(0.3);
  mt::optim::CosineAnnealingLR sb(*b, 8, 0.001);
  sb.load_state_dict(sa.state_dict());
  EXPECT_EQ(sb.last_epoch(), 5);
  EXPECT_EQ(lr_of(*b), lr_of(*a));
  nlohmann::json bad = sa.state_dict();
  bad["last_epoch"] = "five";
  EXPECT_THROW(sb.load_state_dict(bad), mt::Error);
  EXPECT_EQ(sb.last_epoch(), 5);
}

// ---- clip_grad_norm_ --------------------------------------------------------------------------

TEST(ClipGradNorm, TotalNormAndScaling) {
  using mt::testing::random_tensor;
  for (mt::DType dt : {mt::kFloat32, mt::kFloat64, mt::kFloat16}) {
    for (double p : {2.0, 1.0, 3.0, mt::nn::utils::kInfNorm}) {
      SCOPED_TRACE(std::string(mt::dtype_name(dt)) + " p=" + std::to_string(p));
      std::vector<Tensor> params;
      std::vector<double> all;
      for (int i = 0; i < 3; ++i) {
        Tensor w = mt::zeros({100 + 1000 * i}, dt).set_requires_grad(true);
        w.set_grad(random_tensor(w.shape(), dt, 40 + i, -2.0, 2.0));
        for (double v : mt::testing::to_doubles(w.grad())) all.push_back(v);
        params.push_back(w);
      }
      params.push_back(mt::zeros({3}).set_requires_grad(true));  // no grad: skipped
      double ref = 0;
      for (double v : all) ref = std::isinf(p) ? std::max(ref, std::fabs(v)) : ref + std::pow(std::fabs(v), p);
      if (!std::isinf(p)) ref = std::pow(ref, 1 / p);
      const double max_norm = ref / 4;
      const Tensor total_t = mt::nn::utils::clip_grad_norm_(params, max_norm, p);
      EXPECT_EQ(total_t.dim(), 0);
      EXPECT_EQ(total_t.dtype(), dt == mt::kFloat64 ? mt::kFloat64 : mt::kFloat32);
      const double total = total_t.item<double>();
      // Summed in fp64 whatever the gradients' dtype; returned in the norm's dtype.
      EXPECT_NEAR(total, ref, (dt == mt::kFloat64 ? 1e-12 : 1e-7) * ref);
      const double coef = max_norm / (ref + 1e-6);
      std::vector<double> want;
      for (double v : all) want.push_back(v * coef);
      std::vector<double> got;
      for (int i = 0; i < 3; ++i)
        for (double v : mt::testing::to_doubles(params[i].grad())) got.push_back(v);
      Tensor g = mt::from_vector(got, {static_cast<int64_t>(got.size())});
      EXPECT_TRUE(mt::testing::all_close(g, want, mt::testing::tolerance_for(dt)));
    }
  }
}

TEST(ClipGradNorm, BelowTheLimitNothingChangesAndNonFiniteIsReturned) {
  Tensor w = mt::zeros({4}).set_requires_grad(true);
  w.set_grad(mt::from_vector(std::vector<float>{3, 0, -4, 0}, {4}));
  using mt::nn::utils::clip_grad_norm_;
  EXPECT_DOUBLE_EQ(clip_grad_norm_(w, 10.0).item<double>(), 5.0);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{3, 0, -4, 0}));
  EXPECT_DOUBLE_EQ(clip_grad_norm_(std::vector<Tensor>{}, 1.0).item<double>(), 0.0);

  const float inf = std::numeric_limits<float>::infinity();
  w.set_grad(mt::from_vector(std::vector<float>{1, inf, 2, 0}, {4}));
  // error_if_nonfinite: a clear error, and the gradients are left as they were.
  const std::string message = mt::testing::error_of([&] { clip_grad_norm_(w, 1.0, 2.0, true); });
  EXPECT_NE(message.find("clip_grad_norm_"), std::string::npos) << message;
  EXPECT_NE(message.find("inf"), std::string::npos) << message;
  EXPECT_EQ(w.grad().to_vector<float>()[0], 1.0f);
  EXPECT_TRUE(std::isinf(clip_grad_norm_(w, 1.0).item<double>()));
  // PyTorch (error_if_nonfinite=false) scales by max_norm / inf = 0: finite grads become 0.
  EXPECT_EQ(w.grad().to_vector<float>()[0], 0.0f);
  w.set_grad(mt::from_vector(std::vector<float>{1, std::nanf(""), 2, 0}, {4}));
  EXPECT_TRUE(std::isnan(clip_grad_norm_(w, 1.0).item<double>()));
  EXPECT_THROW(clip_grad_norm_(w, 1.0, -1.0), mt::Error);
}

// A channels-last gradient (a channels-last convolution weight's) is read where it lies: the same
// norm and the same clipped values as its NCHW twin.
TEST(ClipGradNorm, ChannelsLastGradientsClipAsTheirNchwTwin) {
  const Tensor g = mt::testing::random_tensor({6, 5, 3, 3}, mt::kFloat32, 77, -2.0, 2.0);
  Tensor w[2] = {mt::zeros({6, 5, 3, 3}).set_requires_grad(true),
                 mt::zeros({6, 5, 3, 3}).contiguous(mt::MemoryFormat::ChannelsLast).set_requires_grad(true)};
  w[0].set_grad(g.clone());
  w[1].set_grad(g.contiguous(mt::MemoryFormat::ChannelsLast));
  const double n0 = mt::nn::utils::clip_grad_norm_(w[0], 1.0).item<double>();
  const double n1 = mt::nn::utils::clip_grad_norm_(w[1], 1.0).item<double>();
  EXPECT_NEAR(n1, n0, 1e-7 * n0);
  EXPECT_EQ(w[1].grad().suggest_memory_format(), mt::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(mt::testing::all_close(w[1].grad(), mt::testing::to_doubles(w[0].grad()), mt::testing::tolerance_for(mt::kFloat32)));
}
