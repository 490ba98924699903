// The names a libtorch user types: tensor({...}) with libtorch's dtype inference, integer
// arange, the dtype aliases (kLong, kFloat, ...), Scalar from item(), Device("cuda:0"), the guards'
// places, squeeze() and type_as. PyTorch's values for the same calls: test_libtorch_pytorch.cpp.
#include <cmath>
#include <limits>
#include <sstream>

#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mixtrain::testing::expect_error;

TEST(LibtorchNames, TensorInfersTheDtypeFromItsValues) {
  EXPECT_EQ(mt::tensor({1, 2, 3}).dtype(), mt::kLong);  // C++ int literals are int64, as in libtorch
  EXPECT_EQ(mt::tensor({1.5, 2.0}).dtype(), mt::kFloat);  // double literals the default float dtype
  EXPECT_EQ(mt::tensor({1.5f}).dtype(), mt::kFloat);
  EXPECT_EQ(mt::tensor({true, false}).dtype(), mt::kBool);
  EXPECT_EQ(mt::tensor({int64_t{1} << 60}).item<int64_t>(), int64_t{1} << 60);  // exact above 2^53
  EXPECT_EQ(mt::tensor({mt::Half(1.5f)}).dtype(), mt::kHalf);
  EXPECT_EQ(mt::tensor({1, 2}, mt::kFloat64).dtype(), mt::kDouble);  // options win
  EXPECT_EQ(mt::tensor({1, 2.5}).to_vector<float>(), (std::vector<float>{1, 2.5}));
  const Tensor m = mt::tensor({{1, 2, 3}, {4, 5, 6}});
  EXPECT_EQ(m.shape(), (mt::Shape{2, 3}));
  EXPECT_EQ(m.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(mt::tensor({{{1.0}, {2.0}}}).shape(), (mt::Shape{1, 2, 1}));
  EXPECT_EQ(mt::tensor(5).dim(), 0);
  EXPECT_EQ(mt::tensor({5}).shape(), (mt::Shape{1}));
  EXPECT_EQ(mt::tensor({}).shape(), (mt::Shape{0}));
  EXPECT_EQ(mt::tensor(std::vector<float>{1, 2, 3}).dtype(), mt::kFloat);
  EXPECT_EQ(mt::tensor(std::vector<int32_t>{1, 2}).dtype(), mt::kLong);
  const Tensor g = mt::tensor({1.0, 2.0}, mt::TensorOptions().requires_grad(true));
  EXPECT_TRUE(g.requires_grad());
  EXPECT_EQ(g.dtype(), mt::kFloat);
  expect_error([] { (void)mt::tensor({{1, 2}, {3}}); }, {"tensor", "not rectangular", "[1]", "[2]"});
}

TEST(LibtorchNames, ArangeIsInt64ForIntegersAndFloat32OtherwiseAsLibtorch) {
  EXPECT_EQ(mt::arange(5).dtype(), mt::kLong);
  EXPECT_EQ(mt::arange(5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(mt::arange(0., 5.).dtype(), mt::kFloat);
  EXPECT_EQ(mt::arange(0, 1, 0.25).to_vector<float>(), (std::vector<float>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(mt::arange(10, 0, -3).to_vector<int64_t>(), (std::vector<int64_t>{10, 7, 4, 1}));
  EXPECT_EQ(mt::arange(5, mt::kFloat64).dtype(), mt::kDouble);
  EXPECT_EQ(mt::arange(3, mt::TensorOptions().requires_grad(false)).dtype(), mt::kLong);  // no dtype given
  const int64_t big = int64_t{1} << 60;
  EXPECT_EQ(mt::arange(big, big + 3).to_vector<int64_t>(), (std::vector<int64_t>{big, big + 1, big + 2}));
  EXPECT_EQ(mt::arange(0, 0).numel(), 0);
  expect_error([] { (void)mt::arange(0, 5, 0); }, {"arange", "non-zero"});
  expect_error([] { (void)mt::arange(5, 0, 1); }, {"arange", "wrong direction"});
  expect_error([] { (void)mt::arange(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()); },
               {"arange", "too many"});
}

TEST(LibtorchNames, DtypeAliasesAndScalarFromItem) {
  static_assert(mt::kLong == mt::kInt64 && mt::kInt == mt::kInt32 && mt::kFloat == mt::kFloat32 &&
                mt::kDouble == mt::kFloat64 && mt::kHalf == mt::kFloat16 && mt::kBFloat16 == mt::DType::BFloat16);
  const mt::ScalarType st = mt::kLong;
  EXPECT_EQ(st, mt::DType::Int64);
  const mt::Scalar f = mt::tensor(2.5).item();
  EXPECT_TRUE(f.isFloatingPoint());
  EXPECT_EQ(f.toDouble(), 2.5);
  EXPECT_EQ(f.to<float>(), 2.5f);
  EXPECT_EQ(f.toLong(), 2);
  const mt::Scalar i = mt::tensor({-7}).sum().item();
  EXPECT_TRUE(i.isIntegral(false));
  EXPECT_EQ(i.toLong(), -7);
  EXPECT_EQ(i.type(), mt::kLong);
  const mt::Scalar b = mt::tensor(true).item();
  EXPECT_TRUE(b.isBoolean() && b.isIntegral(true) && !b.isIntegral(false));
  EXPECT_TRUE(b.toBool());
  EXPECT_EQ(mt::tensor(0.5).to(mt::kHalf).item().toDouble(), 0.5);
  EXPECT_EQ(mt::tensor(3).item<float>(), 3.0f);  // item<T>() still converts
  std::ostringstream os;
  os << f << " " << i << " " << b;
  EXPECT_EQ(os.str(), "2.5 -7 true");
  expect_error([] { (void)mt::ones({2}).item(); }, {"item", "2 elements"});
}

TEST(LibtorchNames, DeviceFromAStringAndTheGuardsWhereLibtorchHasThem) {
  EXPECT_EQ(mt::Device("cuda:1"), mt::Device::cuda(1));
  EXPECT_EQ(mt::Device("cpu"), mt::Device::cpu());
  const mt::Device d = std::string("meta");
  EXPECT_TRUE(d.is_meta());
  EXPECT_EQ(mt::Device::parse("cuda"), mt::Device(mt::kCUDA, 0));
  expect_error([] { (void)mt::Device("gpu0"); }, {"unknown device", "gpu0"});
  Tensor w = mt::ones({2}).set_requires_grad(true);
  {
    mt::NoGradGuard guard;  // torch::NoGradGuard's place
    EXPECT_FALSE(mt::GradMode::is_enabled());
    EXPECT_FALSE((w * 2.0).requires_grad());
  }
  {
    mt::autograd::NoGradGuard guard;  // and the autograd namespace's
    EXPECT_FALSE((w * 2.0).requires_grad());
  }
  EXPECT_TRUE(mt::GradMode::is_enabled());
}

TEST(LibtorchNames, SqueezeEveryUnitDimAndTypeAs) {
  Tensor x = mt::ones({1, 3, 1, 2}).set_requires_grad(true);
  const Tensor s = x.squeeze();
  EXPECT_EQ(s.shape(), (mt::Shape{3, 2}));
  EXPECT_EQ(s.raw_data(), x.raw_data());  // a view
  EXPECT_STREQ(s.grad_fn()->name(), "SqueezeBackward0");
  s.sum().backward();
  EXPECT_EQ(x.grad().shape(), x.shape());
  EXPECT_EQ(mt::ones({1, 1}).squeeze().dim(), 0);
  EXPECT_EQ(mt::tensor(2.0).squeeze().dim(), 0);
  EXPECT_EQ(mt::tensor(2.0).squeeze(0).dim(), 0);
  EXPECT_EQ(mt::squeeze(mt::ones({2, 1}), 1).shape(), (mt::Shape{2}));
  const Tensor t = mt::tensor({1.7, -2.2}).type_as(mt::tensor({1}));
  EXPECT_EQ(t.dtype(), mt::kLong);
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{1, -2}));
  Tensor h = mt::ones({2}).set_requires_grad(true);
  h.type_as(mt::ones({1}, mt::kHalf)).sum().backward();  // differentiable, as to()
  EXPECT_EQ(h.grad().dtype(), mt::kFloat);
}

TEST(LibtorchNames, AllAnyEqualAllclose) {
  const Tensor x = mt::tensor({{1.0, 0.0}, {NAN, 2.0}});
  EXPECT_FALSE(x.all().item<bool>());
  EXPECT_EQ(x.all(1).to_vector<bool>(), (std::vector<bool>{false, true}));  // NaN is non-zero
  EXPECT_EQ(x.any(0, true).shape(), (mt::Shape{1, 2}));
  EXPECT_TRUE(mt::zeros({0}).all().item<bool>());
  EXPECT_FALSE(mt::zeros({0}).any().item<bool>());
  EXPECT_TRUE(mt::tensor({1, 2}).equal(mt::tensor({1.0, 2.0})));  // promoted, as torch.equal
  EXPECT_FALSE(mt::tensor({1, 2}).equal(mt::tensor({1, 2, 3})));
  EXPECT_FALSE(x.equal(x));  // NaN != NaN
  EXPECT_TRUE(x.allclose(x, 1e-5, 1e-8, /*equal_nan=*/true));
  EXPECT_TRUE(mt::allclose(mt::tensor({1.0}), mt::tensor({1.0 + 1e-6})));
  EXPECT_FALSE(mt::allclose(mt::tensor({INFINITY}), mt::tensor({1e30}), 10.0));
  EXPECT_EQ(mt::isclose(mt::tensor({1, 5}), mt::tensor({1, 6})).to_vector<bool>(), (std::vector<bool>{true, false}));
}
