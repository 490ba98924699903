// Backward under autocast: fp32 leaves get fp32 gradients equal to those of the same computation
// written with explicit casts; the weight-cast cache (one cast, one autograd node per weight and
// scope; lifetime; what is not cached; no-grad; several backward passes; other threads).
#include <cmath>
#include <future>
#include <thread>

#include "amp_test_util.h"

namespace mixtrain::amp_test {
namespace {

namespace F = nn::functional;
using amp::AutocastGuard;
constexpr DeviceType kCpu = DeviceType::CPU;

Tensor leaf(const Shape& shape) { return randn(shape, TensorOptions().requires_grad(true)); }
Tensor leaf_copy(const Tensor& t) {
  Tensor c = t.detach().clone();
  c.set_requires_grad(true);
  return c;
}

double rel_error(const Tensor& out, const Tensor& ref) {
  const std::vector<float> o = values_of(out), r = values_of(ref);
  double num = 0, den = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    num += (double(o[i]) - r[i]) * (double(o[i]) - r[i]);
    den += double(r[i]) * r[i];
  }
  return std::sqrt(num / den);
}

class AutocastBackwardTest : public AmpTest, public ::testing::WithParamInterface<DType> {};

TEST_P(AutocastBackwardTest, GradientsEqualExplicitCasts) {
  const DType low = GetParam();
  manual_seed(11);
  const Tensor x = randn({6, 8}), target = randn({6, 4});
  Tensor w = leaf({4, 8}), b = leaf({4});
  Tensor w_ref = leaf_copy(w), b_ref = leaf_copy(b), w64 = leaf_copy(w.to(kFloat64)), b64 = leaf_copy(b.to(kFloat64));

  Tensor loss;
  {
    AutocastGuard autocast(kCpu, low);
    loss = F::mse_loss(relu(linear(x, w, b)), target);
  }
  loss.backward();
  // What autocast should have done, written out: linear in `low`, mse_loss in fp32.
  Tensor loss_ref = F::mse_loss(relu(linear(x.to(low), w_ref.to(low), b_ref.to(low))).to(kFloat32), target);
  loss_ref.backward();

  EXPECT_EQ(loss.dtype(), kFloat32);
  ASSERT_TRUE(w.grad().defined() && b.grad().defined());
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  EXPECT_EQ(b.grad().dtype(), kFloat32);
  EXPECT_EQ(loss.item<float>(), loss_ref.item<float>());
  EXPECT_EQ(values_of(w.grad()), values_of(w_ref.grad()));  // the same ops in the same order: bitwise
  EXPECT_EQ(values_of(b.grad()), values_of(b_ref.grad()));

  // And close to full precision: a few half roundings forward and back (docs/TESTING.md's
  // single-op norm tolerance is 1e-3 / 1e-2; this chain has about five ops).
  F::mse_loss(relu(linear(x.to(kFloat64), w64, b64)), target.to(kFloat64)).backward();
  const double tol = low == kFloat16 ? 1e-2 : 5e-2;
  EXPECT_LT(rel_error(w.grad(), w64.grad()), tol);
  EXPECT_LT(rel_error(b.grad(), b64.grad()), tol);
}

TEST_P(AutocastBackwardTest, WeightUsedTwiceIsCastOnceAndAccumulates) {
  const DType low = GetParam();
  manual_seed(12);
  const Tensor x1 = randn({3, 8}), x2 = randn({3, 8});
  Tensor w = leaf({8, 4}), w_ref = leaf_copy(w);
  Tensor y1, y2, loss;
  {
    AutocastGuard autocast(kCpu, low);
    y1 = matmul(x1, w);
    y2 = matmul(x2, w);
    loss = sum(mul(add(y1, y2), add(y1, y2)));
    EXPECT_EQ(amp::autocast_cache_size(), 1u);
  }
  const amp::AutocastStats st = amp::autocast_stats();
  EXPECT_EQ(st.cache_misses, 1u);
  EXPECT_EQ(st.cache_hits, 1u);
  EXPECT_EQ(st.casts, 3u);  // x1, x2 and w once
  // Both products hang off one cast node.
  ASSERT_TRUE(y1.grad_fn() && y2.grad_fn());
  EXPECT_EQ(y1.grad_fn()->next_edges.at(1).node, y2.grad_fn()->next_edges.at(1).node);
  loss.backward();

  const Tensor wh = w_ref.to(low);  // one explicit cast shared by both uses
  Tensor s = add(matmul(x1.to(low), wh), matmul(x2.to(low), wh));
  sum(mul(s, s), {}, false, kFloat32).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  EXPECT_EQ(values_of(w.grad()), values_of(w_ref.grad()));
}

TEST_P(AutocastBackwardTest, CacheDisabledCastsEveryUse) {
  const DType low = GetParam();
  manual_seed(13);
  const Tensor x1 = randn({3, 8}), x2 = randn({3, 8});
  Tensor w = leaf({8, 4}), w_ref = leaf_copy(w);
  {
    AutocastGuard autocast(kCpu, low, true, /*cache_enabled=*/false);
    sum(add(matmul(x1, w), matmul(x2, w))).backward();
    EXPECT_EQ(amp::autocast_cache_size(), 0u);
  }
  const amp::AutocastStats st = amp::autocast_stats();
  EXPECT_EQ(st.cache_hits + st.cache_misses, 0u);
  EXPECT_EQ(st.casts, 4u);
  // Each use has its own cast, whose backward widens its gradient separately.
  sum(add(matmul(x1.to(low), w_ref.to(low)), matmul(x2.to(low), w_ref.to(low))), {}, false, kFloat32).backward();
  EXPECT_EQ(values_of(w.grad()), values_of(w_ref.grad()));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AutocastBackwardTest, ::testing::Values(kFloat16, kBFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

using WeightCacheTest = AmpTest;

TEST_F(WeightCacheTest, OnlyFp32LeavesThatRequireGradAndAreNotViews) {
  const Tensor x = randn({2, 4});
  Tensor w = leaf({4, 4});
  const Tensor no_grad_w = randn({4, 4}), half_w = leaf({4, 4}).detach().half();
  AutocastGuard autocast(kCpu);
  (void)matmul(x, w.t());           // a view
  (void)matmul(x, mul(w, 1.0));     // not a leaf
  (void)matmul(x, no_grad_w);       // does not require grad
  (void)matmul(x, half_w);          // already low precision: no cast at all
  (void)matmul(x, w.to(kFloat64).to(kFloat32));  // a new non-leaf
  EXPECT_EQ(amp::autocast_cache_size(), 0u);
  EXPECT_EQ(amp::autocast_stats().cache_misses, 0u);
  (void)matmul(x, w);
  EXPECT_EQ(amp::autocast_cache_size(), 1u);
}

TEST_F(WeightCacheTest, LivesForTheOutermostScope) {
  const Tensor x = randn({2, 4});
  Tensor w = leaf({4, 4});
  {
    AutocastGuard outer(kCpu, kFloat16);
    (void)matmul(x, w);
    EXPECT_EQ(amp::autocast_cache_size(), 1u);
    {
      AutocastGuard inner(kCpu, kFloat16);
      (void)matmul(x, w);
      EXPECT_EQ(amp::autocast_stats().cache_hits, 1u);
    }
    {
      AutocastGuard off(kCpu, kFloat16, false);
    }
    EXPECT_EQ(amp::autocast_cache_size(), 1u) << "inner scopes, enabled or not, keep the cache";
    {
      AutocastGuard inner(kCpu, kBFloat16);
      EXPECT_EQ(matmul(x, w).dtype(), kBFloat16) << "an fp16 cast must not serve a bf16 scope";
      EXPECT_EQ(amp::autocast_cache_size(), 2u);
    }
  }
  EXPECT_EQ(amp::autocast_cache_size(), 0u);
  {
    AutocastGuard again(kCpu);
    (void)matmul(x, w);
  }
  EXPECT_EQ(amp::autocast_stats().cache_misses, 3u) << "a new outermost scope casts afresh";
}

// An in-place update of the weight inside the scope (an optimizer step between two forward
// passes) makes its cached cast stale: the next use casts afresh.
TEST_F(WeightCacheTest, AnInPlaceUpdateOfTheWeightIsACacheMiss) {
  const Tensor x = ones({1, 4});
  Tensor w = leaf({4, 4});
  AutocastGuard autocast(kCpu, kFloat16);
  const Tensor before = matmul(x, w);
  {
    NoGradGuard no_grad;
    w.fill_(0.5);
  }
  const Tensor after = matmul(x, w);
  EXPECT_EQ(amp::autocast_stats().cache_misses, 2u);
  for (float v : after.to(kFloat32).to_vector<float>()) EXPECT_EQ(v, 2.0f);  // 4 x 0.5, not the old weight
  (void)matmul(x, w);
  EXPECT_EQ(amp::autocast_stats().cache_hits, 1u);
}

// Another thread's outermost exit drops its own casts only, and never hands its casts to us.
TEST_F(WeightCacheTest, EntriesBelongToTheirThread) {
  const Tensor x = randn({2, 4});
  Tensor w = leaf({4, 4});
  AutocastGuard autocast(kCpu);
  (void)matmul(x, w);
  std::thread other([&] {
    AutocastGuard there(kCpu);
    (void)matmul(x, w);
  });
  other.join();
  EXPECT_EQ(amp::autocast_stats().cache_misses, 2u);
  EXPECT_EQ(amp::autocast_stats().cache_hits, 0u);
  EXPECT_EQ(amp::autocast_cache_size(), 1u);
  (void)matmul(x, w);
  EXPECT_EQ(amp::autocast_stats().cache_hits, 1u);
}

// A cast first made under NoGradGuard, then reused with grad on, must still carry the gradient
// (pytorch #158232: the weight silently got no gradient).
TEST_F(WeightCacheTest, CastCachedUnderNoGradKeepsItsGradient) {
  manual_seed(14);
  const Tensor x = randn({3, 4});
  Tensor w = leaf({4, 2}), w_ref = leaf_copy(w);
  Tensor loss;
  {
    AutocastGuard autocast(kCpu);
    {
      NoGradGuard no_grad;
      EXPECT_FALSE(matmul(x, w).requires_grad());
    }
    loss = sum(matmul(x, w));
  }
  EXPECT_EQ(amp::autocast_stats().cache_hits, 1u);
  loss.backward();
  ASSERT_TRUE(w.grad().defined()) << "the cached cast lost the gradient path";
  sum(matmul(x.half(), w_ref.half()), {}, false, kFloat32).backward();
  EXPECT_EQ(values_of(w.grad()), values_of(w_ref.grad()));
}

// Two losses backpropagated one after the other inside one scope both flow through the one
// cached cast node.
TEST_F(WeightCacheTest, SeveralBackwardPassesInOneScope) {
  manual_seed(15);
  const Tensor x1 = randn({3, 4}), x2 = randn({3, 4});
  Tensor w = leaf({4, 2}), w_ref = leaf_copy(w);
  {
    AutocastGuard autocast(kCpu);
    sum(matmul(x1, w)).backward();
    sum(matmul(x2, w)).backward();
  }
  EXPECT_EQ(amp::autocast_stats().cache_hits, 1u);
  sum(matmul(x1.half(), w_ref.half()), {}, false, kFloat32).backward();
  sum(matmul(x2.half(), w_ref.half()), {}, false, kFloat32).backward();
  EXPECT_EQ(values_of(w.grad()), values_of(w_ref.grad()));
}

// Forward under autocast on one thread, backward on another while the scope is still open, and
// after it has closed.
TEST_F(WeightCacheTest, BackwardOnAnotherThread) {
  manual_seed(16);
  const Tensor x = randn({5, 4}), target = randn({5, 3});
  Tensor w = leaf({3, 4}), w_ref = leaf_copy(w);
  F::mse_loss(linear(x.half(), w_ref.half()).to(kFloat32), target).backward();
  const std::vector<float> expected = values_of(w_ref.grad());

  for (bool scope_open_during_backward : {true, false}) {
    SCOPED_TRACE(scope_open_during_backward ? "scope open" : "scope closed");
    w.set_grad(Tensor());
    std::promise<Tensor> loss_ready;
    std::promise<void> backward_done;
    std::thread forward([&] {
      {
        AutocastGuard autocast(kCpu);
        Tensor loss = F::mse_loss(linear(x, w), target);
        if (!scope_open_during_backward) {
          loss_ready.set_value(loss);
          return;
        }
        loss_ready.set_value(loss);
        backward_done.get_future().wait();
        EXPECT_EQ(amp::autocast_cache_size(), 1u);
      }
    });
    std::thread backward([&] {
      loss_ready.get_future().get().backward();
      if (scope_open_during_backward) backward_done.set_value();
    });
    backward.join();
    forward.join();
    EXPECT_EQ(amp::autocast_cache_size(), 0u);
    ASSERT_TRUE(w.grad().defined());
    EXPECT_EQ(w.grad().dtype(), kFloat32);
    EXPECT_EQ(values_of(w.grad()), expected);
  }
}

}  // namespace
}  // namespace mixtrain::amp_test
