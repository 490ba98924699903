// Sequential, train/eval, Dropout, in-place to(), zero_grad and state dicts.
#include <cmath>

#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::random_tensor;
using mt::testing::to_doubles;
using mt::testing::error_of;

namespace {

mt::nn::Sequential small_mlp() {
  return mt::nn::Sequential(mt::nn::Linear(6, 8), mt::nn::ReLU(), mt::nn::Linear(8, 3));
}

}  // namespace

TEST(Sequential, ChainsForwardsInOrder) {
  mt::manual_seed(4);
  mt::nn::Sequential model(mt::nn::Linear(6, 8), mt::nn::GELU(), mt::nn::Linear(8, 5), mt::nn::Tanh(),
                           mt::nn::Linear(5, 2), mt::nn::Sigmoid());
  ASSERT_EQ(model->size(), 6u);
  const Tensor x = random_tensor({4, 6}, mt::kFloat64, 1);
  model.to(mt::kFloat64);
  auto fc = [&](size_t i) { return model->ptr_as<mt::nn::LinearImpl>(i); };
  ASSERT_NE(fc(0), nullptr);
  EXPECT_EQ(model->ptr_as<mt::nn::LinearImpl>(1), nullptr);
  const Tensor expected =
      mt::sigmoid(fc(4)->forward(mt::tanh(fc(2)->forward(mt::gelu(fc(0)->forward(x))))));
  EXPECT_EQ(to_doubles(model(x)), to_doubles(expected));
  EXPECT_EQ(model.forward(x).shape(), (mt::Shape{4, 2}));
  EXPECT_NE(error_of([&] { (*model)[6]; }).find("index out of range"), std::string::npos);
}

TEST(Sequential, PushBackAndNesting) {
  mt::nn::Sequential model;
  EXPECT_TRUE(model->is_empty());
  model->push_back(mt::nn::Flatten());
  model->push_back(small_mlp());
  model->push_back(std::make_shared<mt::nn::DropoutImpl>(0.1));
  EXPECT_EQ(model->size(), 3u);
  EXPECT_EQ(model.named_parameters().front().first, "1.0.weight");
  EXPECT_EQ(model(mt::zeros({5, 2, 3})).shape(), (mt::Shape{5, 3}));
  // A ModuleList has no single-input forward; Sequential reports that module's name.
  model->push_back(mt::nn::ModuleList(mt::nn::ReLU()));
  EXPECT_NE(error_of([&] { model(mt::zeros({5, 2, 3})); }).find("ModuleList"), std::string::npos);
}

TEST(Sequential, CopiesOfAHandleShareTheModule) {
  mt::nn::Sequential a = small_mlp();
  mt::nn::Sequential b = a;
  EXPECT_EQ(a.ptr(), b.ptr());
  EXPECT_TRUE(a.parameters()[0].is_same(b.parameters()[0]));
}

TEST(Module, TrainAndEvalReachEveryDescendant) {
  mt::nn::Sequential model(small_mlp(), mt::nn::Dropout(0.5), mt::nn::Sequential(mt::nn::Dropout(0.2)));
  auto all_modes = [&] {
    std::vector<bool> modes{model->is_training()};
    for (const auto& [n, m] : model->named_modules()) modes.push_back(m->is_training());
    return modes;
  };
  EXPECT_EQ(all_modes(), std::vector<bool>(8, true));
  model.eval();
  EXPECT_EQ(all_modes(), std::vector<bool>(8, false));
  model.train();
  EXPECT_EQ(all_modes(), std::vector<bool>(8, true));
}

TEST(Dropout, EvalIsIdentityAndTrainDropsAFractionPScaled) {
  const double p = 0.3;
  mt::nn::Dropout drop(p);
  const Tensor x = random_tensor({200, 500}, mt::kFloat32, 3, 1.0, 2.0);  // no zeros in the input
  drop.eval();
  EXPECT_EQ(to_doubles(drop(x)), to_doubles(x));

  drop.train();
  const auto in = to_doubles(x), out = to_doubles(drop(x));
  int64_t zeros = 0;
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (size_t i = 0; i < in.size(); ++i) {
    if (out[i] == 0.0) {
      ++zeros;
    } else {
      // fp32 product of the fp32 input and the fp32 scale, rounded once.
      ASSERT_EQ(out[i], static_cast<double>(static_cast<float>(in[i]) * scale)) << "element " << i;
    }
  }
  const double n = static_cast<double>(in.size());
  // Binomial(n, p): standard deviation sqrt(n p (1 - p)) ~ 145 here; allow 5 of them.
  EXPECT_NEAR(static_cast<double>(zeros), n * p, 5 * std::sqrt(n * p * (1 - p)));
  EXPECT_NE(error_of([] { mt::nn::Dropout(1.5); }).find("[0, 1]"), std::string::npos);
}

TEST(Module, ToHalfInPlaceKeepsHandlesValid) {
  mt::manual_seed(8);
  mt::nn::Sequential model = small_mlp();
  // What an optimizer holds: the parameter handles, taken before the cast.
  const std::vector<Tensor> held = model.parameters();
  std::vector<std::vector<double>> before;
  for (const auto& p : held) before.push_back(to_doubles(p));
  mt::nn::functional::mse_loss(model(mt::randn({4, 6})), mt::zeros({4, 3})).backward();
  ASSERT_TRUE(held[0].grad().defined());

  model.to(mt::kFloat16);
  const auto now = model.parameters();
  for (size_t i = 0; i < held.size(); ++i) {
    EXPECT_TRUE(held[i].is_same(now[i]));
    EXPECT_EQ(held[i].dtype(), mt::kFloat16);
    EXPECT_TRUE(held[i].requires_grad());
    EXPECT_FALSE(held[i].grad().defined()) << "a stale fp32 grad survived the cast";
    // Each value is the fp32 value rounded to fp16 (checked through the rounding of the core).
    const auto expect = to_doubles(mt::from_vector(before[i], held[i].shape()).to(mt::kFloat16));
    EXPECT_EQ(to_doubles(held[i]), expect);
  }
  // Backward reaches the held handles, in fp16.
  const Tensor y = model(mt::randn({4, 6}).to(mt::kFloat16));
  EXPECT_EQ(y.dtype(), mt::kFloat16);
  y.to(mt::kFloat32).sum().backward();
  EXPECT_EQ(held[0].grad().dtype(), mt::kFloat16);
  EXPECT_EQ(held[0].grad().shape(), held[0].shape());

  model.to(mt::Device::cpu(), mt::kFloat32);
  EXPECT_EQ(held[2].dtype(), mt::kFloat32);
  EXPECT_NE(error_of([&] { model.to(mt::kInt64); }).find("floating"), std::string::npos);
}

TEST(Module, ToCastsFloatingBuffersOnly) {
  struct WithBuffers : mt::nn::Module {
    WithBuffers() {
      mean = register_buffer("mean", mt::zeros({3}));
      count = register_buffer("count", mt::zeros({1}, mt::kInt64));
    }
    Tensor mean, count;
  } m;
  m.to(mt::kBFloat16);
  EXPECT_EQ(m.mean.dtype(), mt::kBFloat16);
  EXPECT_EQ(m.count.dtype(), mt::kInt64);
}

TEST(Module, ZeroGradSetsGradsToUndefined) {
  mt::nn::Sequential model = small_mlp();
  model(mt::randn({2, 6})).sum().backward();
  for (const auto& p : model.parameters()) ASSERT_TRUE(p.grad().defined());
  model.zero_grad();
  for (const auto& p : model.parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(StateDict, RoundTripIntoAFreshModelGivesIdenticalOutputs) {
  mt::manual_seed(1);
  mt::nn::Sequential a = small_mlp();
  mt::manual_seed(2);
  mt::nn::Sequential b = small_mlp();
  const Tensor x = mt::randn({5, 6});
  ASSERT_NE(to_doubles(a(x)), to_doubles(b(x)));
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(to_doubles(a(x)), to_doubles(b(x)));
  // The values were copied, not aliased: changing a leaves b alone.
  {
    mt::NoGradGuard no_grad;
    a.parameters()[0].fill_(0.5);
  }
  EXPECT_NE(to_doubles(a(x)), to_doubles(b(x)));
  // Loading a module's own state is a no-op.
  const auto own = to_doubles(b(x));
  b.load_state_dict(b.state_dict());
  EXPECT_EQ(to_doubles(b(x)), own);
}

TEST(StateDict, RejectsMismatchesAndChangesNothing) {
  mt::manual_seed(1);
  mt::nn::Sequential model = small_mlp();
  const auto snapshot = [&] {
    std::vector<std::vector<double>> v;
    for (const auto& p : model.parameters()) v.push_back(to_doubles(p));
    return v;
  };
  const auto original = snapshot();
  mt::manual_seed(99);
  const auto good = small_mlp().state_dict();  // different values, same layout

  auto missing = good;
  missing.erase("2.bias");
  std::string msg = error_of([&] { model.load_state_dict(missing); });
  EXPECT_NE(msg.find("missing keys \"2.bias\""), std::string::npos) << msg;

  auto extra = good;
  extra["3.weight"] = mt::zeros({1});
  msg = error_of([&] { model.load_state_dict(extra); });
  EXPECT_NE(msg.find("unexpected keys \"3.weight\""), std::string::npos) << msg;

  // "2.weight" is checked after "0.*" entries that would load fine; they must not be copied.
  auto bad_shape = good;
  bad_shape["2.weight"] = mt::zeros({3, 9});
  msg = error_of([&] { model.load_state_dict(bad_shape); });
  EXPECT_NE(msg.find("shape mismatch for \"2.weight\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3, 9]"), std::string::npos) << msg;

  auto bad_dtype = good;
  bad_dtype["2.bias"] = mt::zeros({3}, mt::kFloat16);
  msg = error_of([&] { model.load_state_dict(bad_dtype); });
  EXPECT_NE(msg.find("dtype mismatch for \"2.bias\""), std::string::npos) << msg;

  EXPECT_EQ(snapshot(), original);

  // Non-strict loads the keys both sides have.
  model.load_state_dict(missing, /*strict=*/false);
  EXPECT_EQ(to_doubles(model.parameters()[0]), to_doubles(good.at("0.weight")));
  EXPECT_EQ(to_doubles(model.parameters()[3]), original[3]);
}
