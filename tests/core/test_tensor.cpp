// Tensor handles, factories, views, contiguous(), casts, the RNG and error messages.
#include <cmath>

#include "support/testing.h"

namespace mt = mixtrain;
using mt::testing::expect_error;
using mt::testing::to_doubles;

TEST(Tensor, FactoriesFillShapesAndDtypes) {
  mt::Tensor z = mt::zeros({2, 3});
  EXPECT_EQ(z.shape(), (mt::Shape{2, 3}));
  EXPECT_EQ(z.dtype(), mt::kFloat32);
  EXPECT_EQ(z.numel(), 6);
  for (double v : to_doubles(z)) EXPECT_EQ(v, 0.0);
  for (double v : to_doubles(mt::full({4}, 2.5, mt::TensorOptions(mt::kBFloat16)))) EXPECT_EQ(v, 2.5);
  auto a = mt::arange(0, 5, 1, mt::TensorOptions(mt::kInt64)).to_vector<int64_t>();
  EXPECT_EQ(a, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  mt::Tensor h = mt::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(mt::from_vector(std::vector<int64_t>{7}, {1}).dtype(), mt::kInt64);
  EXPECT_THROW(mt::from_vector(std::vector<float>{1, 2, 3}, {2, 2}), mt::Error);
  EXPECT_THROW(mt::zeros({2, 3}).item<float>(), mt::Error);
}

TEST(Tensor, RandomFactoriesAreSeededAndDistributedAsExpected) {
  mt::manual_seed(42);
  auto a = mt::randn({20000}).to_vector<float>();
  mt::manual_seed(42);
  auto b = mt::randn({20000}).to_vector<float>();
  EXPECT_EQ(a, b);
  double mean = 0, var = 0;
  for (float v : a) mean += v;
  mean /= a.size();
  for (float v : a) var += (v - mean) * (v - mean);
  var /= a.size();
  EXPECT_NEAR(mean, 0.0, 0.03);  // 4 sigma of the sample mean
  EXPECT_NEAR(var, 1.0, 0.04);
  auto u = mt::rand({20000}).to_vector<float>();
  for (float v : u) ASSERT_TRUE(v >= 0.0f && v < 1.0f);
  mt::Generator g(7);
  const auto state = g.state();
  const double first = g.next_uniform();
  g.set_state(state);
  EXPECT_EQ(g.next_uniform(), first);
}

TEST(Tensor, ViewsShareStorageAndReadTheRightElements) {
  mt::Tensor x = mt::arange(0, 24, 1, mt::TensorOptions(mt::kFloat64)).reshape({2, 3, 4});
  mt::Tensor t = x.transpose(0, 2);  // [4, 3, 2]
  EXPECT_EQ(t.shape(), (mt::Shape{4, 3, 2}));
  EXPECT_FALSE(t.is_contiguous());
  auto tv = to_doubles(t);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) EXPECT_EQ(tv[(i * 3 + j) * 2 + k], k * 12 + j * 4 + i);
  EXPECT_TRUE(t.contiguous().is_contiguous());
  EXPECT_EQ(to_doubles(t.contiguous()), tv);
  auto p = to_doubles(x.permute({1, 0, 2}));
  EXPECT_EQ(p[4], 12);  // [0][1][0] of the permuted = x[1][0][0]
  auto s = to_doubles(x.slice(2, 1, 4, 2));  // columns 1 and 3
  EXPECT_EQ(s, (std::vector<double>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23}));
  EXPECT_EQ(to_doubles(x.select(1, 2)), (std::vector<double>{8, 9, 10, 11, 20, 21, 22, 23}));
  EXPECT_EQ(x.unsqueeze(1).shape(), (mt::Shape{2, 1, 3, 4}));
  EXPECT_EQ(x.unsqueeze(1).squeeze(1).shape(), x.shape());
  EXPECT_EQ(x.flatten(1).shape(), (mt::Shape{2, 12}));
  EXPECT_EQ(x.reshape({-1, 6}).shape(), (mt::Shape{4, 6}));
  EXPECT_EQ(to_doubles(mt::from_vector(std::vector<double>{1, 2}, {2, 1}).expand({2, 3})),
            (std::vector<double>{1, 1, 1, 2, 2, 2}));
  // Reshape of a non-contiguous tensor copies.
  EXPECT_EQ(to_doubles(t.reshape({24}))[1], 12.0);
  // A write through a view lands in the base.
  {
    mt::NoGradGuard no_grad;
    x.select(0, 1).fill_(-1.0);
  }
  EXPECT_EQ(to_doubles(x)[12], -1.0);
  EXPECT_EQ(to_doubles(x)[11], 11.0);
}

TEST(Tensor, ViewErrorsNameTheProblem) {
  mt::Tensor x = mt::zeros({2, 3});
  EXPECT_THROW(x.reshape({4, 2}), mt::Error);
  EXPECT_THROW(x.transpose(0, 2), mt::Error);
  EXPECT_THROW(x.t().view({6}), mt::Error);
  EXPECT_THROW(x.expand({3, 3}), mt::Error);
  EXPECT_THROW(x.permute({0, 0}), mt::Error);
  expect_error([&] { x.narrow(1, 2, 2); }, "narrow");
}

TEST(Tensor, CastsRoundToNearestEvenAndRoundTrip) {
  mt::Tensor x = mt::from_vector(std::vector<float>{1.0f, 1.0f + 1.0f / 2048, 65504.0f, 70000.0f, -2.5f, 1e-8f}, {6});
  auto h = x.to(mt::kFloat16).to_vector<float>();
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], 1.0f);  // tie rounds to even
  EXPECT_EQ(h[2], 65504.0f);
  EXPECT_TRUE(std::isinf(h[3]));
  EXPECT_EQ(h[4], -2.5f);
  EXPECT_EQ(h[5], 0.0f);  // below half of the smallest subnormal
  auto b = x.to(mt::kBFloat16).to(mt::kFloat32).to_vector<float>();
  EXPECT_EQ(b[2], 65536.0f);
  auto i = mt::from_vector(std::vector<float>{1.9f, -2.7f}, {2}).to(mt::kInt64).to_vector<int64_t>();
  EXPECT_EQ(i, (std::vector<int64_t>{1, -2}));  // truncation, as C++ and PyTorch
  EXPECT_EQ(mt::zeros({2}).to(mt::kFloat16).dtype(), mt::kFloat16);
}

TEST(Tensor, DevicesAndErrors) {
  EXPECT_EQ(mt::Device::parse("cuda:1"), mt::Device::cuda(1));
  EXPECT_EQ(mt::Device::parse("cpu"), mt::Device::cpu());
  EXPECT_THROW(mt::Device::parse("tpu"), mt::Error);
  if (!mt::cuda::is_available()) {
    EXPECT_THROW(mt::zeros({2}, mt::TensorOptions().device(mt::Device::cuda())), mt::Error);
  }
  EXPECT_THROW(mt::zeros({2}, mt::TensorOptions(mt::kInt64).requires_grad(true)), mt::Error);
  EXPECT_EQ(mt::dtype_from_name("bf16"), mt::kBFloat16);
  EXPECT_THROW(mt::dtype_from_name("fp8"), mt::Error);
}

TEST(Tensor, PromotionTable) {
  EXPECT_EQ(mt::promote_types(mt::kFloat16, mt::kBFloat16), mt::kFloat32);
  EXPECT_EQ(mt::promote_types(mt::kFloat16, mt::kFloat32), mt::kFloat32);
  EXPECT_EQ(mt::promote_types(mt::kBFloat16, mt::kFloat64), mt::kFloat64);
  EXPECT_EQ(mt::promote_types(mt::kInt64, mt::kFloat16), mt::kFloat16);
  EXPECT_EQ(mt::promote_types(mt::kBool, mt::kInt32), mt::kInt32);
}
