// The backward engine: accumulation, grad mode, detach, errors, release of saved tensors.
#include <cmath>

#include "support/testing.h"

namespace mt = mixtrain;
using mt::testing::expect_error;
using mt::testing::to_doubles;

TEST(Autograd, TensorUsedTwiceAccumulatesBothPaths) {
  mt::Tensor x = mt::from_vector(std::vector<double>{1, 2, 3}, {3}).set_requires_grad(true);
  mt::Tensor y = (x * x + x * 3.0).sum();  // dy/dx = 2x + 3
  y.backward();
  EXPECT_EQ(to_doubles(x.grad()), (std::vector<double>{5, 7, 9}));
  // A second backward through a new graph accumulates into .grad, as in PyTorch.
  (x * 2.0).sum().backward();
  EXPECT_EQ(to_doubles(x.grad()), (std::vector<double>{7, 9, 11}));
}

TEST(Autograd, DiamondGraphRunsEachNodeOnceWithSummedGradient) {
  mt::Tensor x = mt::from_vector(std::vector<double>{0.5, -1.0}, {2}).set_requires_grad(true);
  mt::Tensor h = mt::tanh(x);
  mt::Tensor y = (mt::exp(h) + h * h).sum();
  y.backward();
  auto xv = to_doubles(x);
  auto g = to_doubles(x.grad());
  for (int i = 0; i < 2; ++i) {
    const double t = std::tanh(xv[i]);
    EXPECT_NEAR(g[i], (std::exp(t) + 2 * t) * (1 - t * t), 1e-12);
  }
}

TEST(Autograd, NoGradAndDetachStopHistory) {
  mt::Tensor x = mt::randn({3}, mt::TensorOptions().requires_grad(true));
  {
    mt::NoGradGuard guard;
    mt::Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(mt::autograd::is_grad_enabled() == false);
  }
  EXPECT_TRUE(mt::autograd::is_grad_enabled());
  mt::Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.raw_data(), x.raw_data());
  mt::Tensor y = (x * d).sum();  // d is a constant
  y.backward();
  EXPECT_EQ(to_doubles(x.grad()), to_doubles(x));
}

TEST(Autograd, BackwardErrors) {
  mt::Tensor x = mt::randn({3}, mt::TensorOptions().requires_grad(true));
  mt::Tensor y = x * 2.0;
  expect_error([&] { y.backward(); }, {"scalar outputs", "[3]"});
  y.backward(mt::ones({3}));
  EXPECT_EQ(to_doubles(x.grad()), (std::vector<double>(3, 2.0)));
  EXPECT_THROW(mt::randn({2}).sum().backward(), mt::Error);
  mt::Tensor z = mt::exp(x).sum();
  z.backward();
  // The saved tensors are gone after the first backward.
  EXPECT_THROW(z.backward(), mt::Error);
  EXPECT_THROW(y.backward(mt::ones({4})), mt::Error);
}

TEST(Autograd, SavedActivationsAreReleasedDuringBackward) {
  // The exp node saves its output; once backward has run it, the activation's storage must be
  // held by nobody but the user-visible handle.
  mt::Tensor x = mt::randn({1000}, mt::TensorOptions().requires_grad(true));
  mt::Tensor e = mt::exp(x);
  const auto storage = e.impl()->storage;
  EXPECT_GT(storage.use_count(), 2);  // e, the saved copy, and `storage`
  mt::Tensor loss = e.sum();
  loss.backward();
  EXPECT_EQ(storage.use_count(), 2);  // e and `storage`
}

TEST(Autograd, MemoryOfAnMlpStepReturnsToParametersAndGradients) {
  const auto dev = mt::Device::cpu();
  mt::Tensor w1 = mt::randn({256, 128}, mt::TensorOptions().requires_grad(true));
  mt::Tensor w2 = mt::randn({10, 256}, mt::TensorOptions().requires_grad(true));
  mt::Tensor x = mt::randn({64, 128});
  const int64_t before = mt::memory::stats(dev).allocated_bytes;
  {
    mt::Tensor loss = mt::square(mt::linear(mt::relu(mt::linear(x, w1)), w2)).mean();
    loss.backward();
  }
  const int64_t after = mt::memory::stats(dev).allocated_bytes;
  // Only the two gradients remain (the allocator rounds sizes up a little).
  const int64_t grads = (256 * 128 + 10 * 256) * 4;
  EXPECT_GE(after - before, grads);
  EXPECT_LE(after - before, grads + 4096);
}
