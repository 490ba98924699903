// LinearLR, StepLR, MultiStepLR, ExponentialLR, LambdaLR and SequentialLR against PyTorch's values:
// its recursive (chained) get_lr updates, replayed here step by step, and its closed forms.
#include <cmath>
#include <functional>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace optim = mixtrain::optim;
using mt::Tensor;
using mt::testing::expect_error;

namespace {
constexpr double kPi = 3.14159265358979323846;

std::unique_ptr<optim::SGD> make_sgd(std::vector<double> lrs) {
  std::vector<optim::ParamGroup> groups;
  for (double lr : lrs) {
    optim::ParamGroup g({mt::zeros({2}).set_requires_grad(true)});
    g.set_options(std::make_unique<optim::SGDOptions>(lr));
    groups.push_back(std::move(g));
  }
  return std::make_unique<optim::SGD>(std::move(groups));
}
double lr_of(const optim::Optimizer& o, size_t g = 0) { return o.param_groups()[g].options().get_lr(); }

// PyTorch's chained form: lr_t = update(lr_{t-1}, t), lr_0 = first(base).
using Update = std::function<double(double lr, int64_t t)>;
void expect_chain(optim::LRScheduler& s, const optim::Optimizer& o, double base, const std::function<double(double)>& first,
                  const Update& update, const std::function<double(int64_t)>& closed, int steps) {
  double lr = first(base);
  EXPECT_NEAR(lr_of(o), lr, 1e-15 * base);
  for (int64_t t = 1; t <= steps; ++t) {
    s.step(true);
    lr = update(lr, t);
    EXPECT_NEAR(lr_of(o), lr, 1e-12 * base) << s.state_dict()["type"] << " chained, t=" << t;
    EXPECT_NEAR(lr_of(o), closed(t), 1e-15 * base) << s.state_dict()["type"] << " closed form, t=" << t;
  }
}
}  // namespace

TEST(SchedulersPyTorch, LinearLR) {
  auto opt = make_sgd({0.5});
  const double sf = 0.1, ef = 0.9;
  const int64_t n = 6;
  optim::LinearLR s(*opt, sf, ef, n);
  // torch/optim/lr_scheduler.py LinearLR.get_lr
  expect_chain(s, *opt, 0.5, [&](double b) { return b * sf; },
               [&](double lr, int64_t t) {
                 if (t > n) return lr;
                 return lr * (1.0 + (ef - sf) / (n * sf + (t - 1) * (ef - sf)));
               },
               [&](int64_t t) { return 0.5 * (sf + (ef - sf) * std::min<int64_t>(t, n) / n); }, 12);
  expect_error([&] { optim::LinearLR(*opt, 0.0); }, "start_factor must be in (0, 1]");
}

TEST(SchedulersPyTorch, StepMultiStepExponential) {
  {
    auto opt = make_sgd({1.0});
    optim::StepLR s(*opt, 3, 0.5);
    expect_chain(s, *opt, 1.0, [](double b) { return b; },
                 [](double lr, int64_t t) { return (t == 0 || t % 3 != 0) ? lr : lr * 0.5; },
                 [](int64_t t) { return std::pow(0.5, static_cast<double>(t / 3)); }, 14);
  }
  {
    auto opt = make_sgd({2.0});
    optim::MultiStepLR s(*opt, {8, 2, 5, 5}, 0.1);  // unsorted, 5 twice: gamma^2 there
    auto count = [](int64_t t) { return (t == 2) + (t == 5) * 2 + (t == 8); };
    expect_chain(s, *opt, 2.0, [](double b) { return b; },
                 [&](double lr, int64_t t) { return lr * std::pow(0.1, count(t)); },
                 [](int64_t t) { return 2.0 * std::pow(0.1, (t >= 2) + 2 * (t >= 5) + (t >= 8)); }, 10);
  }
  {
    auto opt = make_sgd({0.3});
    optim::ExponentialLR s(*opt, 0.9);
    expect_chain(s, *opt, 0.3, [](double b) { return b; }, [](double lr, int64_t) { return lr * 0.9; },
                 [](int64_t t) { return 0.3 * std::pow(0.9, static_cast<double>(t)); }, 20);
  }
}

TEST(SchedulersPyTorch, LambdaLRPerGroup) {
  auto opt = make_sgd({1.0, 0.1});
  optim::LambdaLR s(*opt, {[](int64_t t) { return 1.0 / (1.0 + static_cast<double>(t)); },
                           [](int64_t t) { return std::pow(0.95, static_cast<double>(t)); }});
  for (int64_t t = 0; t < 6; ++t) {
    EXPECT_DOUBLE_EQ(lr_of(*opt, 0), 1.0 / (1.0 + static_cast<double>(t)));
    EXPECT_DOUBLE_EQ(lr_of(*opt, 1), 0.1 * std::pow(0.95, static_cast<double>(t)));
    s.step(true);
  }
  auto one = make_sgd({1.0});
  optim::LambdaLR bad(*one, [](int64_t t) { return t < 2 ? 1.0 : -1.0; });
  bad.step(true);
  expect_error([&] { bad.step(true); }, "lr_lambda(2) of group 0 returned -1");
}

// SequentialLR as PyTorch steps it: at a milestone the next scheduler restarts with step(0) (its
// closed form at epoch 0); otherwise that scheduler's chained update at its own epoch.
TEST(SchedulersPyTorch, SequentialWarmupThenCosine) {
  auto opt = make_sgd({0.8});
  const double base = 0.8, sf = 0.01, eta_min = 0.001;
  const int64_t warm = 5, T = 20;
  auto warmup = std::make_shared<optim::LinearLR>(*opt, sf, 1.0, warm);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(*opt, T, eta_min);
  optim::SequentialLR s(*opt, {warmup, cosine}, {warm});
  double lr = base * sf;
  EXPECT_NEAR(lr_of(*opt), lr, 1e-15);
  for (int64_t t = 1; t <= 40; ++t) {
    s.step(true);
    if (t < warm) {
      lr = lr * (1.0 + (1.0 - sf) / (warm * sf + (t - 1) * (1.0 - sf)));
    } else if (t == warm) {
      lr = eta_min + (base - eta_min) * (1 + std::cos(0.0)) / 2;  // step(0): closed form
    } else {
      const int64_t e = t - warm;  // CosineAnnealingLR.get_lr, chained
      if ((e - 1 - T) % (2 * T) == 0)
        lr = lr + (base - eta_min) * (1 - std::cos(kPi / T)) / 2;
      else
        lr = (1 + std::cos(kPi * e / T)) / (1 + std::cos(kPi * (e - 1) / T)) * (lr - eta_min) + eta_min;
    }
    const double closed = t < warm ? base * (sf + (1.0 - sf) * t / warm)
                                   : eta_min + (base - eta_min) * (1 + std::cos(kPi * (t - warm) / T)) / 2;
    EXPECT_NEAR(lr_of(*opt), lr, 1e-12) << "t=" << t;
    EXPECT_NEAR(lr_of(*opt), closed, 1e-15) << "t=" << t;
  }
}

TEST(SchedulersPyTorch, SequentialThreeStages) {
  auto opt = make_sgd({1.0});
  auto a = std::make_shared<optim::LinearLR>(*opt, 0.5, 1.0, 2);
  auto b = std::make_shared<optim::StepLR>(*opt, 2, 0.5);
  auto c = std::make_shared<optim::ExponentialLR>(*opt, 0.9);
  optim::SequentialLR s(*opt, {a, b, c}, {3, 8});
  const std::vector<double> want{0.5, 0.75, 1.0,                     // LinearLR epochs 0..2
                                 1.0, 1.0, 0.5, 0.5, 0.25,           // StepLR epochs 0..4
                                 1.0, 0.9, 0.81, 0.9 * 0.81};        // ExponentialLR epochs 0..3
  for (size_t t = 0; t < want.size(); ++t) {
    EXPECT_NEAR(lr_of(*opt), want[t], 1e-15) << "t=" << t;
    s.step(true);
  }
  expect_error([&] { optim::SequentialLR(*opt, {a, b}, {3, 8}); }, "2 schedulers need 1 milestones, got 2");
  expect_error([&] { optim::SequentialLR(*opt, {a, b, c}, {8, 3}); }, "increasing");
  auto other = make_sgd({1.0});
  auto foreign = std::make_shared<optim::StepLR>(*other, 2);
  expect_error([&] { optim::SequentialLR(*opt, {a, foreign}, {3}); }, "drives another optimizer");
}

TEST(SchedulersPyTorch, StateDictsRoundTripAndAreValidated) {
  auto make = [](optim::Optimizer& o, double gamma) {
    auto w = std::make_shared<optim::LinearLR>(o, 0.1, 1.0, 4);
    auto d = std::make_shared<optim::StepLR>(o, 3, gamma);
    return std::make_unique<optim::SequentialLR>(o, std::vector<std::shared_ptr<optim::LRScheduler>>{w, d},
                                                 std::vector<int64_t>{4});
  };
  auto oa = make_sgd({0.2});
  auto sa = make(*oa, 0.5);
  for (int i = 0; i < 9; ++i) sa->step(true);
  auto ob = make_sgd({0.2});
  auto sb = make(*ob, 0.5);
  sb->load_state_dict(nlohmann::json::parse(sa->state_dict().dump()));
  EXPECT_EQ(sb->last_epoch(), 9);
  EXPECT_EQ(lr_of(*ob), lr_of(*oa));
  for (int i = 0; i < 5; ++i) {
    sa->step(true);
    sb->step(true);
    EXPECT_EQ(lr_of(*ob), lr_of(*oa));
  }
  auto oc = make_sgd({0.2});
  auto sc = make(*oc, 0.25);  // another decay: rejected, nothing changes
  const double before = lr_of(*oc);
  expect_error([&] { sc->load_state_dict(sa->state_dict()); }, {"SequentialLR state_dict.schedulers", "another schedule"});
  EXPECT_EQ(sc->last_epoch(), 0);
  EXPECT_EQ(lr_of(*oc), before);

  auto od = make_sgd({1.0});
  optim::StepLR step(*od, 3, 0.5);
  nlohmann::json st = step.state_dict();
  EXPECT_EQ(st["step_size"], 3);
  EXPECT_EQ(st["gamma"], 0.5);
  st["gamma"] = 0.1;
  expect_error([&] { step.load_state_dict(st); }, "StepLR state_dict.gamma is 0.1 but this scheduler's is 0.5");
  st = step.state_dict();
  st["type"] = "ExponentialLR";
  expect_error([&] { step.load_state_dict(st); }, "but the scheduler is StepLR");
  st = step.state_dict();
  st.erase("gamma");  // states without settings (saved by older versions) still load
  st["last_epoch"] = 4;
  step.load_state_dict(st);
  EXPECT_DOUBLE_EQ(lr_of(*od), 0.5);
}
