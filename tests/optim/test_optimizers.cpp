// SGD / Adam / AdamW against fp64 references written from PyTorch's documented algorithms
// (the pseudocode on the torch.optim.SGD / Adam / AdamW pages), over several steps with fresh
// random gradients, for fp64, fp32 and half parameters (with and without fp32 master weights).
#include <cmath>
#include <string>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::all_close;
using mt::testing::expect_error;
using mt::testing::random_tensor;
using mt::testing::to_doubles;
using mt::testing::tolerance_for;

namespace {

struct Hyper {
  std::string algo;  // "sgd", "adam", "adamw"
  double lr = 1e-2, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool amsgrad = false;
};

// The reference: one parameter's state in fp64, advanced by the documented formulas.
struct Ref {
  std::vector<double> w, m, v, vmax, buf;
  int t = 0;

  void step(const Hyper& h, std::vector<double> g) {
    ++t;
    const size_t n = w.size();
    if (m.empty()) m.assign(n, 0.0), v.assign(n, 0.0), vmax.assign(n, 0.0);
    if (h.algo == "sgd") {
      for (size_t i = 0; i < n; ++i) {
        if (h.weight_decay != 0) g[i] += h.weight_decay * w[i];
        if (h.momentum != 0) {
          const double b = t > 1 ? h.momentum * buf[i] + (1 - h.dampening) * g[i] : g[i];
          if (buf.size() < n) buf.resize(n);
          buf[i] = b;
          g[i] = h.nesterov ? g[i] + h.momentum * b : b;
        }
        w[i] -= h.lr * g[i];
      }
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      if (h.algo == "adamw") w[i] -= h.lr * h.weight_decay * w[i];
      if (h.algo == "adam" && h.weight_decay != 0) g[i] += h.weight_decay * w[i];
      m[i] = h.beta1 * m[i] + (1 - h.beta1) * g[i];
      v[i] = h.beta2 * v[i] + (1 - h.beta2) * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(h.beta1, t));
      vmax[i] = std::max(vmax[i], v[i]);
      const double vhat = (h.amsgrad ? vmax[i] : v[i]) / (1 - std::pow(h.beta2, t));
      w[i] -= h.lr * mhat / (std::sqrt(vhat) + h.eps);
    }
  }
};

std::unique_ptr<mt::optim::Optimizer> make(const Hyper& h, std::vector<Tensor> params, bool master) {
  namespace o = mt::optim;
  if (h.algo == "sgd")
    return std::make_unique<o::SGD>(params, o::SGDOptions(h.lr)
                                                .momentum(h.momentum)
                                                .dampening(h.dampening)
                                                .weight_decay(h.weight_decay)
                                                .nesterov(h.nesterov)
                                                .master_weights(master));
  if (h.algo == "adam")
    return std::make_unique<o::Adam>(params, o::AdamOptions(h.lr)
                                                 .betas({h.beta1, h.beta2})
                                                 .eps(h.eps)
                                                 .weight_decay(h.weight_decay)
                                                 .amsgrad(h.amsgrad)
                                                 .master_weights(master));
  return std::make_unique<o::AdamW>(params, o::AdamWOptions(h.lr)
                                                .betas({h.beta1, h.beta2})
                                                .eps(h.eps)
                                                .weight_decay(h.weight_decay)
                                                .amsgrad(h.amsgrad)
                                                .master_weights(master));
}

Tensor find_state(const mt::optim::Optimizer& opt, const std::string& name) {
  for (const auto& [n, t] : opt.state_tensors())
    if (n == name) return t;
  return Tensor();
}

std::vector<Hyper> all_configs() {
  std::vector<Hyper> c;
  c.push_back({"sgd", 0.1});
  Hyper h{"sgd", 0.05, 0.9};
  c.push_back(h);
  h.dampening = 0.3;  // first step must still take buf = g, not (1 - dampening) g
  h.weight_decay = 0.01;
  c.push_back(h);
  Hyper n{"sgd", 0.05, 0.9, 0.0, 1e-3, true};
  c.push_back(n);
  c.push_back({"adam", 1e-2});
  Hyper a{"adam", 3e-3};
  a.weight_decay = 0.05;
  a.beta1 = 0.3;  // 1 - beta1 >= 0.5 takes lerp's other formula
  c.push_back(a);
  Hyper ams{"adam", 1e-2};
  ams.amsgrad = true;
  c.push_back(ams);
  Hyper aw{"adamw", 1e-2};
  aw.weight_decay = 0.1;
  c.push_back(aw);
  aw.amsgrad = true;
  c.push_back(aw);
  return c;
}

std::string describe(const Hyper& h) {
  std::ostringstream os;
  os << h.algo << " lr=" << h.lr << " mom=" << h.momentum << " damp=" << h.dampening << " wd=" << h.weight_decay
     << " nesterov=" << h.nesterov << " beta1=" << h.beta1 << " amsgrad=" << h.amsgrad;
  return os.str();
}

// Runs `steps` steps on a parameter of `shape` and dtype, comparing with the reference.
void check_against_reference(const Hyper& h, mt::DType dtype, const mt::Shape& shape, bool master, int steps,
                             const mt::testing::Tolerance& tol) {
  SCOPED_TRACE(describe(h) + " dtype=" + mt::dtype_name(dtype) + (master ? " master" : ""));
  Tensor p = random_tensor(shape, dtype, 11, -1.0, 1.0).set_requires_grad(true);
  auto opt = make(h, {p}, master);
  Ref ref;
  ref.w = to_doubles(p);
  for (int k = 0; k < steps; ++k) {
    Tensor g = random_tensor(shape, dtype, 100 + k, -1.0, 1.0);
    p.set_grad(g);
    opt->step();
    ref.step(h, to_doubles(g));
  }
  const Tensor weight = master ? opt->master_params()[0] : p;
  ASSERT_EQ(weight.dtype(), master ? mt::kFloat32 : dtype);
  EXPECT_TRUE(all_close(weight, ref.w, tol));
  if (h.algo != "sgd") {
    EXPECT_TRUE(all_close(find_state(*opt, "state.0.exp_avg"), ref.m, tol));
    EXPECT_TRUE(all_close(find_state(*opt, "state.0.exp_avg_sq"), ref.v, tol));
    if (h.amsgrad) EXPECT_TRUE(all_close(find_state(*opt, "state.0.max_exp_avg_sq"), ref.vmax, tol));
  } else if (h.momentum != 0) {
    EXPECT_TRUE(all_close(find_state(*opt, "state.0.momentum_buffer"), ref.buf, tol));
  }
  if (master) {
    // The half parameter is the master rounded to nearest even.
    const std::vector<float> m = weight.to_vector<float>();
    const Tensor expected = mt::from_vector(m, shape).to(dtype);
    const Tensor diff = mt::ne(p, expected).to(mt::kInt64).sum();
    EXPECT_EQ(diff.item<int64_t>(), 0);
  }
}

}  // namespace

TEST(Optimizers, Float64MatchesDocumentedFormulas) {
  // fp64 parameters compute in fp64: only the formulas' rounding differs from the reference.
  for (const Hyper& h : all_configs()) check_against_reference(h, mt::kFloat64, {7, 9}, false, 6, tolerance_for(mt::kFloat64));
}

TEST(Optimizers, Float32MatchesReference) {
  for (const Hyper& h : all_configs()) check_against_reference(h, mt::kFloat32, {13, 17}, false, 6, tolerance_for(mt::kFloat32));
}

TEST(Optimizers, Float32LargeTensorUsesThreadsAndMatches) {
  // 40,000 elements: above the parallel grain, so the OpenMP split runs.
  for (const Hyper& h : all_configs()) check_against_reference(h, mt::kFloat32, {200, 200}, false, 3, tolerance_for(mt::kFloat32));
}

TEST(Optimizers, MasterWeightsUpdateInFloat32) {
  // Half parameters with master weights: the fp32 master follows the fp32 update of the
  // (half) gradients, and the half parameter is its rounding.
  for (mt::DType dt : {mt::kFloat16, mt::kBFloat16}) {
    for (const Hyper& h : all_configs())
      check_against_reference(h, dt, {33, 40}, true, 5, tolerance_for(mt::kFloat32));
    check_against_reference(all_configs()[4], dt, {200, 200}, true, 3, tolerance_for(mt::kFloat32));
  }
}

TEST(Optimizers, HalfParametersWithoutMasterWeights) {
  // Each step rounds the weight (and state) to fp16 once: after 5 steps the error is within a
  // few half-ulps of |w| (2^-11 relative each), hence rtol 4e-3.
  const mt::testing::Tolerance tol{4e-3, 4e-3, 1e-3};
  for (Hyper h : {Hyper{"sgd", 0.05, 0.9}, Hyper{"adam", 5e-2}, Hyper{"adamw", 5e-2}}) {
    check_against_reference(h, mt::kFloat16, {16, 16}, false, 5, tol);
  }
  Tensor p = random_tensor({4}, mt::kFloat16, 1).set_requires_grad(true);
  mt::optim::Adam adam({p}, mt::optim::AdamOptions());
  p.set_grad(random_tensor({4}, mt::kFloat16, 2));
  adam.step();
  EXPECT_EQ(find_state(adam, "state.0.exp_avg").dtype(), mt::kFloat16);  // PyTorch: zeros_like(param)
  EXPECT_FALSE(adam.has_master_weights());
}

TEST(Optimizers, SkipsParametersWithoutGradAndZeroGradUndefines) {
  Tensor a = random_tensor({3}, mt::kFloat32, 1).set_requires_grad(true);
  Tensor b = random_tensor({3}, mt::kFloat32, 2).set_requires_grad(true);
  const std::vector<double> b0 = to_doubles(b);
  mt::optim::SGD sgd({a, b}, mt::optim::SGDOptions(0.1));
  a.set_grad(mt::ones({3}));
  sgd.step();
  EXPECT_EQ(to_doubles(b), b0);
  EXPECT_EQ(sgd.steps_taken(), 1);
  sgd.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
}

TEST(Optimizers, ParamGroupsHaveTheirOwnOptions) {
  Tensor a = mt::zeros({2}).set_requires_grad(true);
  Tensor b = mt::zeros({2}).set_requires_grad(true);
  std::vector<mt::optim::ParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{a});
  groups.emplace_back(std::vector<Tensor>{b}, mt::optim::SGDOptions(1.0));
  mt::optim::SGD sgd(groups, mt::optim::SGDOptions(0.1));
  ASSERT_EQ(sgd.param_groups().size(), 2u);
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].options().get_lr(), 0.1);
  EXPECT_DOUBLE_EQ(sgd.param_groups()[1].options().get_lr(), 1.0);
  a.set_grad(mt::ones({2}));
  b.set_grad(mt::ones({2}));
  sgd.step();
  EXPECT_FLOAT_EQ(a.to_vector<float>()[0], -0.1f);
  EXPECT_FLOAT_EQ(b.to_vector<float>()[0], -1.0f);
  sgd.param_groups()[0].options().set_lr(0.5);
  sgd.step();
  EXPECT_FLOAT_EQ(a.to_vector<float>()[0], -0.6f);
  auto& o = static_cast<mt::optim::SGDOptions&>(sgd.param_groups()[1].options());
  EXPECT_DOUBLE_EQ(o.lr(), 1.0);
}

TEST(Optimizers, InvalidOptionsAndParametersAreErrors) {
  namespace o = mt::optim;
  Tensor p = mt::zeros({2}).set_requires_grad(true);
  expect_error([&] { o::SGD s({p}, o::SGDOptions(-1.0)); }, "invalid lr");
  expect_error([&] { o::SGD s({p}, o::SGDOptions(0.1).nesterov(true)); }, "Nesterov momentum requires");
  expect_error([&] { o::SGD s({p}, o::SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)); }, "zero dampening");
  expect_error([&] { o::Adam a({p}, o::AdamOptions().betas({0.9, 1.0})); }, "betas[1]");
  expect_error([&] { o::Adam a({p}, o::AdamOptions().betas({-0.1, 0.9})); }, "betas[0]");
  expect_error([&] { o::AdamW a({p}, o::AdamWOptions().eps(-1)); }, "eps");
  expect_error([&] { o::AdamW a({p}, o::AdamWOptions().weight_decay(-1)); }, "weight_decay");
  expect_error([&] { o::Adam a({p, p}); }, "more than once");
  expect_error([&] { o::Adam a(std::vector<Tensor>{}); }, "empty parameter list");
  Tensor q = mt::zeros({2}).set_requires_grad(true);
  Tensor nonleaf = q * 2.0;
  expect_error([&] { o::Adam a({nonleaf}); }, "not a leaf");
  expect_error([&] { o::Adam a({mt::zeros({2}, mt::kInt64)}); }, "floating");
  std::vector<o::ParamGroup> mixed;
  mixed.emplace_back(std::vector<Tensor>{p}, o::SGDOptions(0.1));
  expect_error([&] { o::Adam a(mixed); }, "another optimizer's type");
}

TEST(Optimizers, DeviceGatedStepsMatchHostDecidedSteps) {
  // step(found_inf) decides in the kernels (GradScaler's sync-free path); the host twin calls
  // step() or mark_step_skipped(). Skips before the first taken step, between steps, and a
  // parameter without a gradient in a skipped step must leave both runs bit-identical, with the
  // same step counts and momentum-buffer initialisation.
  namespace o = mt::optim;
  const std::vector<float> flags{1, 0, 1, 0, 0, 1, 0};
  for (int config = 0; config < 4; ++config) {
    const mt::DType dt = config == 3 ? mt::kFloat16 : mt::kFloat32;
    auto make = [&](std::vector<Tensor> params) -> std::unique_ptr<o::Optimizer> {
      switch (config) {
        case 0: return std::make_unique<o::Adam>(params, o::AdamOptions().lr(0.05).weight_decay(0.1));
        case 1: return std::make_unique<o::AdamW>(params, o::AdamWOptions().lr(0.05).amsgrad(true));
        case 2: return std::make_unique<o::SGD>(params, o::SGDOptions(0.1).momentum(0.9).dampening(0.5));
        default: return std::make_unique<o::AdamW>(params, o::AdamWOptions().lr(0.05).master_weights(true));
      }
    };
    Tensor a1 = random_tensor({40, 7}, dt, 1).set_requires_grad(true), b1 = random_tensor({5}, dt, 2).set_requires_grad(true);
    Tensor a2 = a1.detach().clone().set_requires_grad(true), b2 = b1.detach().clone().set_requires_grad(true);
    auto gated = make({a1, b1});
    auto host = make({a2, b2});
    for (size_t i = 0; i < flags.size(); ++i) {
      SCOPED_TRACE("config " + std::to_string(config) + ", step " + std::to_string(i));
      const Tensor g = random_tensor(a1.shape(), dt, 10 + static_cast<uint64_t>(i));
      a1.set_grad(g.clone());
      a2.set_grad(g.clone());
      const bool b_has_grad = i != 2;  // b sits out one skipped step
      if (b_has_grad) {
        const Tensor gb = random_tensor(b1.shape(), dt, 50 + static_cast<uint64_t>(i));
        b1.set_grad(gb.clone());
        b2.set_grad(gb.clone());
      } else {
        b1.set_grad(Tensor());
        b2.set_grad(Tensor());
      }
      gated->step(mt::full({}, flags[i], mt::TensorOptions(mt::kFloat32)));
      if (flags[i] != 0.0f) host->mark_step_skipped();
      else host->step();
      ASSERT_EQ(to_doubles(a1), to_doubles(a2));
      ASSERT_EQ(to_doubles(b1), to_doubles(b2));
      EXPECT_EQ(gated->last_step_skipped(), flags[i] != 0.0f);
    }
    EXPECT_EQ(gated->steps_taken(), 4);
    EXPECT_EQ(gated->steps_skipped(), 3);
    const nlohmann::json sg = gated->state_dict(), sh = host->state_dict();
    EXPECT_EQ(sg, sh);
    EXPECT_EQ(sg["state"]["0"]["step"], 4);
    const auto tg = gated->state_tensors(), th = host->state_tensors();
    ASSERT_EQ(tg.size(), th.size());
    for (size_t k = 0; k < tg.size(); ++k) EXPECT_EQ(to_doubles(tg[k].second), to_doubles(th[k].second)) << tg[k].first;
  }
  Tensor p = mt::zeros({2}).set_requires_grad(true);
  o::SGD sgd({p}, o::SGDOptions(0.1));
  p.set_grad(mt::ones({2}));
  expect_error([&] { sgd.step(mt::zeros({}, mt::TensorOptions(mt::kFloat64))); },
               "SGD.step: found_inf must be a float32 scalar");
}

// ---- channels-last weights (Module::to(MemoryFormat)) -------------------------------------------

namespace {

mt::nn::Sequential small_convnet() {
  mt::manual_seed(7);
  return mt::nn::Sequential(mt::nn::Conv2d(mt::nn::Conv2dOptions(3, 8, 3).padding(1)), mt::nn::ReLU(),
                            mt::nn::BatchNorm2d(8), mt::nn::Conv2d(mt::nn::Conv2dOptions(8, 4, 3).padding(1)));
}

// Trains `net` for `steps` steps (fp16 autocast with a GradScaler, or pure half parameters with
// fp32 master weights) on random batches, images in `layout`; returns the losses.
template <class Opt>
std::vector<double> train_convnet(mt::nn::Sequential& net, Opt& opt, mt::amp::GradScaler& scaler, int first, int steps,
                                  mt::MemoryFormat layout, mt::DType input_dtype) {
  std::vector<double> losses;
  for (int s = first; s < first + steps; ++s) {
    const Tensor x = random_tensor({4, 3, 6, 6}, input_dtype, 100 + s).contiguous(layout);
    const Tensor y = random_tensor({4, 4, 6, 6}, mt::kFloat32, 200 + s);
    opt.zero_grad();
    Tensor loss;
    {
      mt::amp::AutocastGuard autocast(mt::DeviceType::CPU, mt::kFloat16);
      loss = mt::nn::functional::mse_loss(net->forward(x).to(mt::kFloat32), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

void expect_channels_last_state(const mt::optim::Optimizer& opt) {
  for (const auto& [name, t] : opt.state_tensors())
    if (t.dim() == 4) EXPECT_EQ(t.suggest_memory_format(), mt::MemoryFormat::ChannelsLast) << name;
}

}  // namespace

// A model moved to channels-last trains as its NCHW twin: gradients, optimizer state and fp32
// master weights follow the weights' layout, and the fused updates run on them in place.
TEST(Optimizers, ChannelsLastWeightsTrainAsTheirNchwTwin) {
  for (bool half_params : {false, true}) {
    SCOPED_TRACE(half_params ? "fp16 parameters, fp32 master weights, SGD" : "fp32 parameters, autocast, AdamW");
    std::vector<double> losses[2];
    for (int cl = 0; cl < 2; ++cl) {
      mt::nn::Sequential net = small_convnet();
      if (half_params) net->to(mt::kFloat16);
      const mt::MemoryFormat layout = cl ? mt::MemoryFormat::ChannelsLast : mt::MemoryFormat::Contiguous;
      if (cl) net->to(layout);
      const Tensor w0 = net->parameters()[0];
      ASSERT_EQ(w0.suggest_memory_format(), layout);
      mt::amp::GradScaler scaler;
      const mt::DType in_dt = half_params ? mt::kFloat16 : mt::kFloat32;
      if (half_params) {
        mt::optim::SGD opt(net->parameters(), mt::optim::SGDOptions(0.05).momentum(0.9).master_weights(true));
        losses[cl] = train_convnet(net, opt, scaler, 0, 6, layout, in_dt);
        if (cl) {
          expect_channels_last_state(opt);
          EXPECT_EQ(opt.master_params()[0].suggest_memory_format(), mt::MemoryFormat::ChannelsLast);
        }
      } else {
        mt::optim::AdamW opt(net->parameters(), mt::optim::AdamWOptions(1e-2));
        losses[cl] = train_convnet(net, opt, scaler, 0, 6, layout, in_dt);
        if (cl) expect_channels_last_state(opt);
      }
      EXPECT_EQ(net->parameters()[0].suggest_memory_format(), layout) << "the step kept the layout";
      EXPECT_TRUE(w0.is_same(net->parameters()[0]));
    }
    ASSERT_EQ(losses[0].size(), losses[1].size());
    EXPECT_GT(losses[0].front(), losses[0].back()) << "it trains";
    for (size_t i = 0; i < losses[0].size(); ++i)
      EXPECT_NEAR(losses[1][i], losses[0][i], 2e-3 * std::abs(losses[0][i])) << "step " << i;
  }
}

// Changing the layout after the optimizer has state is reported, naming the fix.
TEST(Optimizers, ALayoutChangeAfterTheFirstStepIsAClearError) {
  mt::nn::Sequential net = small_convnet();
  mt::optim::AdamW opt(net->parameters(), mt::optim::AdamWOptions(1e-2));
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().enabled(false));
  train_convnet(net, opt, scaler, 0, 1, mt::MemoryFormat::Contiguous, mt::kFloat32);
  net->to(mt::MemoryFormat::ChannelsLast);
  const std::string message = mt::testing::error_of(
      [&] { train_convnet(net, opt, scaler, 1, 1, mt::MemoryFormat::ChannelsLast, mt::kFloat32); });
  EXPECT_NE(message.find("AdamW.step: exp_avg"), std::string::npos) << message;
  EXPECT_NE(message.find("Module::to(MemoryFormat)"), std::string::npos) << message;
}
