// Conv2d, ConvTranspose2d, MaxPool2d and Upsample: shapes, parameter counts and names as
// PyTorch's, forward equal to the functional op on the module's parameters, PyTorch's init.
#include <cmath>

#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::expect_error;
using mt::testing::names_of;
using mt::testing::random_tensor;
using mt::testing::to_doubles;

namespace {

int64_t count(const std::vector<Tensor>& ps) {
  int64_t n = 0;
  for (const auto& p : ps) n += p.numel();
  return n;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : to_doubles(t)) m = std::max(m, std::abs(v));
  return m;
}

}  // namespace

TEST(Conv2dModule, ShapesCountsAndNames) {
  mt::nn::Conv2d conv(mt::nn::Conv2dOptions(4, 6, {3, 5}).stride(2).padding({1, 2}).dilation(1).groups(2));
  EXPECT_EQ(conv->weight.shape(), (mt::Shape{6, 2, 3, 5}));
  EXPECT_EQ(conv->bias.shape(), (mt::Shape{6}));
  // PyTorch: out * in / groups * kh * kw + out.
  EXPECT_EQ(count(conv.parameters()), 6 * 4 / 2 * 3 * 5 + 6);
  EXPECT_EQ(names_of(conv.state_dict()), (std::vector<std::string>{"bias", "weight"}));
  const Tensor x = random_tensor({2, 4, 9, 10}, mt::kFloat32, 1);
  const Tensor y = conv(x);
  // floor((9 + 2 - 3) / 2) + 1 = 5, floor((10 + 4 - 5) / 2) + 1 = 5
  EXPECT_EQ(y.shape(), (mt::Shape{2, 6, 5, 5}));
  const Tensor ref = mt::nn::functional::conv2d(x, conv->weight, conv->bias, 2, {1, 2}, 1, 2);
  EXPECT_EQ(to_doubles(y), to_doubles(ref));

  mt::nn::Conv2d plain(mt::nn::Conv2dOptions(3, 8, 1).bias(false));
  EXPECT_FALSE(plain->bias.defined());
  EXPECT_EQ(names_of(plain.state_dict()), std::vector<std::string>{"weight"});
  EXPECT_EQ(plain(random_tensor({1, 3, 4, 4}, mt::kFloat32, 2)).shape(), (mt::Shape{1, 8, 4, 4}));
}

TEST(Conv2dModule, KaimingUniformInitAsPyTorch) {
  mt::manual_seed(4);
  mt::nn::Conv2d conv(64, 64, 3);
  const double bound = 1.0 / std::sqrt(64.0 * 9.0);  // fan_in = in * kh * kw
  EXPECT_LE(max_abs(conv->weight), bound);
  EXPECT_GT(max_abs(conv->weight), 0.99 * bound);
  double s2 = 0;
  for (double v : to_doubles(conv->weight)) s2 += v * v;
  EXPECT_NEAR(std::sqrt(s2 / static_cast<double>(conv->weight.numel())), bound / std::sqrt(3.0), 0.02 * bound);
  EXPECT_LE(max_abs(conv->bias), bound);
}

TEST(ConvTranspose2dModule, ShapesCountsForwardAndInit) {
  mt::manual_seed(5);
  mt::nn::ConvTranspose2d up(mt::nn::ConvTranspose2dOptions(8, 4, 2).stride(2).groups(2));
  // PyTorch's layout: [in, out / groups, kh, kw].
  EXPECT_EQ(up->weight.shape(), (mt::Shape{8, 2, 2, 2}));
  EXPECT_EQ(count(up.parameters()), 8 * 4 / 2 * 2 * 2 + 4);
  EXPECT_EQ(names_of(up.state_dict()), (std::vector<std::string>{"bias", "weight"}));
  const Tensor x = random_tensor({2, 8, 5, 3}, mt::kFloat32, 3);
  const Tensor y = up(x);
  EXPECT_EQ(y.shape(), (mt::Shape{2, 4, 10, 6}));
  EXPECT_EQ(to_doubles(y), to_doubles(mt::nn::functional::conv_transpose2d(x, up->weight, up->bias, 2, 0, 0, 2)));
  // PyTorch computes fan_in from the weight: out / groups * kh * kw = 8.
  const double bound = 1.0 / std::sqrt(8.0);
  EXPECT_LE(max_abs(up->weight), bound);
  EXPECT_GT(max_abs(up->weight), 0.5 * bound);
  EXPECT_LE(max_abs(up->bias), bound);

  mt::nn::ConvTranspose2d padded(mt::nn::ConvTranspose2dOptions(3, 3, 3).stride(2).padding(1).output_padding(1));
  EXPECT_EQ(padded(random_tensor({1, 3, 4, 4}, mt::kFloat32, 4)).shape(), (mt::Shape{1, 3, 8, 8}));
}

TEST(ConvModules, RejectBadOptionsAndInputs) {
  EXPECT_THROW(mt::nn::Conv2d(mt::nn::Conv2dOptions(3, 4, 3).groups(2)), mt::Error);
  EXPECT_THROW(mt::nn::Conv2d(0, 4, 3), mt::Error);
  EXPECT_THROW(mt::nn::Conv2d(mt::nn::Conv2dOptions(3, 4, 3).stride(0)), mt::Error);
  EXPECT_THROW(mt::nn::Conv2d(mt::nn::Conv2dOptions(3, 4, 3).output_padding(1)), mt::Error);
  mt::nn::Conv2d conv(3, 4, 3);
  expect_error([&] { conv(mt::zeros({1, 5, 8, 8})); }, "Conv2d");
  EXPECT_THROW(mt::nn::ConvTranspose2d(4, 3, 2)(mt::zeros({1, 3, 8, 8})), mt::Error);
}

TEST(ConvModules, GradientsReachParameters) {
  mt::nn::Conv2d conv(mt::nn::Conv2dOptions(2, 3, 3).padding(1));
  mt::nn::ConvTranspose2d up(mt::nn::ConvTranspose2dOptions(3, 2, 2).stride(2));
  conv(up(conv(random_tensor({2, 2, 4, 4}, mt::kFloat32, 6)))).sum().backward();
  for (const auto& p : conv.parameters()) EXPECT_GT(max_abs(p.grad()), 0);
  for (const auto& p : up.parameters()) EXPECT_GT(max_abs(p.grad()), 0);
}

TEST(MaxPool2dModule, MatchesFunctional) {
  mt::nn::MaxPool2d pool(2);
  EXPECT_TRUE(pool.parameters().empty());
  const Tensor x = random_tensor({2, 3, 8, 6}, mt::kFloat32, 7);
  const Tensor y = pool(x);
  EXPECT_EQ(y.shape(), (mt::Shape{2, 3, 4, 3}));
  EXPECT_EQ(to_doubles(y), to_doubles(mt::nn::functional::max_pool2d(x, 2)));
  // Each output is the max of its own 2x2 window.
  const auto xv = to_doubles(x), yv = to_doubles(y);
  EXPECT_EQ(yv[0], std::max(std::max(xv[0], xv[1]), std::max(xv[6], xv[7])));

  mt::nn::MaxPool2d strided(mt::nn::MaxPool2dOptions(3).stride(2).padding(1));
  EXPECT_EQ(strided(x).shape(), (mt::Shape{2, 3, 4, 3}));
}

TEST(UpsampleModule, DoublesSize) {
  mt::nn::Upsample up(mt::nn::functional::InterpolateOptions().scale_factor(2.0));
  const Tensor x = random_tensor({1, 2, 3, 4}, mt::kFloat32, 8);
  const Tensor y = up(x);
  EXPECT_EQ(y.shape(), (mt::Shape{1, 2, 6, 8}));
  // Nearest: each input pixel fills a 2x2 block.
  EXPECT_EQ(to_doubles(y)[8 + 1], to_doubles(x)[0]);
}
