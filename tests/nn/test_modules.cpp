// nn::Module and the layers: registration and naming, Linear against an fp64 reference and
// finite differences, containers, train/eval, Dropout, in-place to(), state dicts.
#include <algorithm>
#include <cmath>
#include <set>

#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::all_close;
using mt::testing::gradcheck;
using mt::testing::names_of;
using mt::testing::random_tensor;
using mt::testing::to_doubles;
using mt::testing::error_of;
using mt::testing::tolerance_for;

namespace {

// A module with its own parameter, a buffer and two children, to check naming and order.
class BlockImpl : public mt::nn::Module {
 public:
  BlockImpl() : Module("Block") {
    scale = register_parameter("scale", mt::ones({3}));
    fc1 = register_module("fc1", mt::nn::Linear(3, 4));
    steps = register_buffer("steps", mt::zeros({1}, mt::kInt64));
    fc2 = register_module("fc2", mt::nn::Linear(4, 2, /*bias=*/false));
  }
  Tensor forward(const Tensor& x) override { return fc2(mt::relu(fc1(x * scale))); }
  Tensor scale, steps;
  mt::nn::Linear fc1{nullptr}, fc2{nullptr};
};
MT_MODULE(Block);

// y[r, o] = sum_i x[r, i] w[o, i] + b[o], in fp64 on the values the layer actually holds.
std::vector<double> linear_reference(const Tensor& x, const Tensor& w, const Tensor& b) {
  const auto xv = to_doubles(x), wv = to_doubles(w), bv = to_doubles(b);
  const int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = bv[static_cast<size_t>(o)];
      for (int64_t i = 0; i < in; ++i) s += xv[static_cast<size_t>(r * in + i)] * wv[static_cast<size_t>(o * in + i)];
      y[static_cast<size_t>(r * out + o)] = s;
    }
  return y;
}

struct Moments {
  double mean, std, max_abs;
};
Moments moments(const Tensor& t) {
  const auto v = to_doubles(t);
  double s = 0, s2 = 0, m = 0;
  for (double x : v) s += x, m = std::max(m, std::abs(x));
  const double mean = s / static_cast<double>(v.size());
  for (double x : v) s2 += (x - mean) * (x - mean);
  return {mean, std::sqrt(s2 / static_cast<double>(v.size() - 1)), m};
}

}  // namespace

TEST(Module, RegistersInOrderWithDottedNames) {
  Block block;
  EXPECT_EQ(names_of(block.named_parameters()),
            (std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "fc2.weight"}));
  EXPECT_EQ(names_of(block->named_parameters(/*recurse=*/false)), std::vector<std::string>{"scale"});
  EXPECT_EQ(names_of(block->named_buffers()), std::vector<std::string>{"steps"});
  EXPECT_EQ(block.parameters().size(), 4u);
  EXPECT_TRUE(block.parameters()[1].is_same(block->fc1->weight));
  auto children = block->named_children();
  ASSERT_EQ(children.size(), 2u);
  EXPECT_EQ(children[0].first, "fc1");
  EXPECT_EQ(children[0].second.get(), block->fc1.ptr().get());
  EXPECT_EQ(names_of(block.state_dict()),
            (std::vector<std::string>{"fc1.bias", "fc1.weight", "fc2.weight", "scale", "steps"}));
  for (const auto& p : block.parameters()) EXPECT_TRUE(p.requires_grad());
  EXPECT_FALSE(block->steps.requires_grad());
}

TEST(Module, NestedNamesAndSharedParametersListedOnce) {
  mt::nn::Linear shared(3, 3);
  mt::nn::Sequential inner(mt::nn::Linear(2, 3), mt::nn::ReLU());
  mt::nn::Sequential model(inner, shared, mt::nn::Tanh(), shared);
  EXPECT_EQ(names_of(model.named_parameters()),
            (std::vector<std::string>{"0.0.weight", "0.0.bias", "1.weight", "1.bias"}));
  std::vector<std::string> modules;
  for (const auto& [n, m] : model->named_modules()) modules.push_back(n);
  EXPECT_EQ(modules, (std::vector<std::string>{"0", "0.0", "0.1", "1", "2", "3"}));
  // state_dict keeps every name, as PyTorch's does for tied weights.
  EXPECT_EQ(model.state_dict().size(), 6u);
}

TEST(Module, RejectsBadRegistrations) {
  struct Bad : mt::nn::Module {
    void add(const std::string& n) { register_parameter(n, mt::zeros({1})); }
    void add_buffer(const std::string& n) { register_buffer(n, mt::zeros({1})); }
  } m;
  m.add("w");
  EXPECT_NE(error_of([&] { m.add("w"); }).find("\"w\" is already registered"), std::string::npos);
  EXPECT_NE(error_of([&] { m.add_buffer("w"); }).find("already a parameter"), std::string::npos);
  EXPECT_NE(error_of([&] { m.add("a.b"); }).find("must not contain '.'"), std::string::npos);
  EXPECT_NE(error_of([&] { m.add(""); }).find("must not be empty"), std::string::npos);
  EXPECT_NE(error_of([&] { m.forward(mt::zeros({2})); }).find("forward(const Tensor&) is not implemented"),
            std::string::npos);
}

TEST(Linear, ForwardMatchesFp64ReferenceForEveryFloatDtype) {
  for (mt::DType dtype : {mt::kFloat32, mt::kFloat16, mt::kBFloat16, mt::kFloat64}) {
    SCOPED_TRACE(mt::dtype_name(dtype));
    mt::manual_seed(11);
    mt::nn::Linear fc(37, 19);
    fc.to(dtype);
    ASSERT_EQ(fc->weight.dtype(), dtype);
    for (const mt::Shape& shape : {mt::Shape{16, 37}, mt::Shape{2, 5, 37}}) {
      const Tensor x = random_tensor(shape, dtype, 5);
      const Tensor y = fc(x);
      mt::Shape expected = shape;
      expected.back() = 19;
      EXPECT_EQ(y.shape(), expected);
      EXPECT_EQ(y.dtype(), dtype);
      EXPECT_TRUE(all_close(y, linear_reference(x, fc->weight, fc->bias), tolerance_for(dtype)));
    }
  }
}

TEST(Linear, WithoutBias) {
  mt::nn::Linear fc(mt::nn::LinearOptions(6, 4).bias(false));
  EXPECT_FALSE(fc->bias.defined());
  EXPECT_EQ(names_of(fc.named_parameters()), std::vector<std::string>{"weight"});
  const Tensor x = random_tensor({3, 6}, mt::kFloat32, 2);
  EXPECT_TRUE(all_close(fc(x), linear_reference(x, fc->weight, mt::zeros({4})), tolerance_for(mt::kFloat32)));
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  mt::nn::Linear fc(5, 3);
  fc.to(mt::kFloat64);
  const Tensor x = random_tensor({4, 5}, mt::kFloat64, 9);
  // The weight and bias are passed as gradcheck inputs so it perturbs them in place; the module
  // reads the same storage.
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return fc(in[0]); }, {x, fc->weight, fc->bias}));
}

TEST(Linear, RejectsWrongInputWidth) {
  mt::nn::Linear fc(5, 3);
  const std::string msg = error_of([&] { fc(mt::zeros({2, 4})); });
  EXPECT_NE(msg.find("Linear"), std::string::npos) << msg;
  EXPECT_NE(msg.find("in_features = 5"), std::string::npos) << msg;
}

TEST(Linear, DefaultInitIsPyTorchs) {
  // kaiming_uniform_(a = sqrt(5)): gain sqrt(2 / 6), bound gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in).
  mt::manual_seed(3);
  mt::nn::Linear fc(400, 300);
  const double bound = 1.0 / std::sqrt(400.0);
  const Moments w = moments(fc->weight), b = moments(fc->bias);
  EXPECT_LE(w.max_abs, bound);
  EXPECT_GT(w.max_abs, 0.999 * bound);  // 120k draws reach the edge
  EXPECT_NEAR(w.std, bound / std::sqrt(3.0), 0.01 * bound);
  EXPECT_LE(b.max_abs, bound);
  EXPECT_GT(b.max_abs, 0.8 * bound);
  // Same seed, same parameters.
  mt::manual_seed(3);
  mt::nn::Linear again(400, 300);
  EXPECT_EQ(to_doubles(again->weight), to_doubles(fc->weight));
}

TEST(Init, GainsAndFans) {
  namespace init = mt::nn::init;
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::Linear), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::Sigmoid), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::Tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::ReLU), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::LeakyReLU), std::sqrt(2.0 / (1 + 0.01 * 0.01)));
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::LeakyReLU, 0.2), std::sqrt(2.0 / 1.04));
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::SELU), 0.75);
  EXPECT_EQ(init::calculate_fan_in_and_fan_out(mt::empty({64, 32, 3, 5})), std::make_pair(int64_t{480}, int64_t{960}));
  EXPECT_EQ(init::calculate_fan_in_and_fan_out(mt::empty({7, 3})), std::make_pair(int64_t{3}, int64_t{7}));
  EXPECT_NE(error_of([] { init::kaiming_uniform_(mt::empty({5})); }).find("fewer than 2"), std::string::npos);
  EXPECT_NE(error_of([] { init::uniform_(mt::empty({5}, mt::kInt64)); }).find("floating"), std::string::npos);
}

TEST(Init, DistributionsHaveTheirBoundsAndMoments) {
  namespace init = mt::nn::init;
  mt::manual_seed(1);
  const double n = 256.0 * 128 * 9;  // samples; the standard error of a mean is std / sqrt(n)
  const double fan_in = 128 * 9, fan_out = 256 * 9;
  auto check_uniform = [&](const Tensor& t, double bound) {
    const Moments m = moments(t);
    EXPECT_LE(m.max_abs, bound);
    EXPECT_GT(m.max_abs, 0.999 * bound);
    const double sd = bound / std::sqrt(3.0);
    EXPECT_NEAR(m.mean, 0.0, 5 * sd / std::sqrt(n));
    EXPECT_NEAR(m.std, sd, 0.01 * sd);
  };
  auto check_normal = [&](const Tensor& t, double mean, double sd) {
    const Moments m = moments(t);
    EXPECT_NEAR(m.mean, mean, 5 * sd / std::sqrt(n));
    EXPECT_NEAR(m.std, sd, 0.01 * sd);
    EXPECT_GT(m.max_abs, std::abs(mean) + 4 * sd);  // tails exist: ~19 draws beyond 4.5 sigma
  };
  auto w = [] { return mt::empty({256, 128, 3, 3}); };
  {
    SCOPED_TRACE("kaiming_uniform_ relu");
    check_uniform(init::kaiming_uniform_(w(), 0.0, init::FanMode::FanIn, init::Nonlinearity::ReLU),
                  std::sqrt(2.0) * std::sqrt(3.0 / fan_in));
  }
  {
    SCOPED_TRACE("kaiming_normal_ fan_out");
    check_normal(init::kaiming_normal_(w(), 0.0, init::FanMode::FanOut, init::Nonlinearity::ReLU), 0.0,
                 std::sqrt(2.0 / fan_out));
  }
  {
    SCOPED_TRACE("xavier_uniform_ tanh gain");
    const double gain = 5.0 / 3.0;
    check_uniform(init::xavier_uniform_(w(), gain), gain * std::sqrt(6.0 / (fan_in + fan_out)));
  }
  {
    SCOPED_TRACE("xavier_normal_");
    check_normal(init::xavier_normal_(w()), 0.0, std::sqrt(2.0 / (fan_in + fan_out)));
  }
  {
    SCOPED_TRACE("normal_(3, 2)");
    check_normal(init::normal_(w(), 3.0, 2.0), 3.0, 2.0);
  }
  {
    SCOPED_TRACE("uniform_(-2, 5)");
    const Tensor u = init::uniform_(w(), -2.0, 5.0);
    const auto v = to_doubles(u);
    EXPECT_GE(*std::min_element(v.begin(), v.end()), -2.0);
    EXPECT_LT(*std::max_element(v.begin(), v.end()), 5.0);
    const double sd = 7.0 / std::sqrt(12.0);
    EXPECT_NEAR(moments(u).mean, 1.5, 5 * sd / std::sqrt(n));
  }
  for (auto [t, value] : {std::pair{init::zeros_(w()), 0.0}, {init::ones_(w()), 1.0}, {init::constant_(w(), -0.25), -0.25}}) {
    const auto v = to_doubles(t);
    EXPECT_EQ(std::set<double>(v.begin(), v.end()), std::set<double>{value});
  }
}

TEST(Init, WritesInPlaceIntoHalfParametersThatRequireGrad) {
  Tensor p = mt::zeros({64, 64}, mt::TensorOptions().dtype(mt::kFloat16).requires_grad(true));
  Tensor same = mt::nn::init::uniform_(p, -1.0, 1.0);
  EXPECT_TRUE(same.is_same(p));
  EXPECT_EQ(p.dtype(), mt::kFloat16);
  EXPECT_TRUE(p.requires_grad());
  EXPECT_GT(moments(p).max_abs, 0.9);
}
