// dot and addcmul (the promote-policy ops): forward against fp64 loops written here, gradients
// against central finite differences in fp64, half dtypes, broadcasting, non-contiguous inputs
// and argument errors (docs/TESTING.md).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mixtrain {
namespace {

std::vector<double> as_doubles(const Tensor& t) { return t.to(kFloat64).contiguous().to_vector<double>(); }

// d(sum(f(inputs) * probe)) / d(inputs[k]) by central differences, everything in fp64.
std::vector<double> numeric_grad(const std::function<Tensor(std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                                 size_t k, const Tensor& probe) {
  std::vector<double> base = as_doubles(inputs[k]), grad(base.size());
  const double eps = 1e-6;
  for (size_t i = 0; i < base.size(); ++i) {
    double value[2];
    for (int s = 0; s < 2; ++s) {
      std::vector<double> v = base;
      v[i] += s ? -eps : eps;
      inputs[k] = from_vector(v, inputs[k].shape());
      value[s] = sum(mul(f(inputs), probe)).item<double>();
    }
    grad[i] = (value[0] - value[1]) / (2 * eps);
  }
  return grad;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(std::abs(got[i] - want[i]), atol + rtol * std::abs(want[i])) << "index " << i << ": " << got[i] << " vs " << want[i];
}

TEST(Dot, ForwardMatchesReferenceInEveryFloatingDtype) {
  manual_seed(3);
  const Tensor a = randn({37}), b = randn({37});
  for (auto [dt, rtol] : {std::pair{kFloat64, 1e-12}, std::pair{kFloat32, 1e-5}, std::pair{kFloat16, 1e-2},
                          std::pair{kBFloat16, 5e-2}}) {
    const Tensor ah = a.to(dt), bh = b.to(dt);
    // Reference over the inputs as stored in dt, accumulated in fp64.
    const std::vector<double> ra = as_doubles(ah), rb = as_doubles(bh);
    double ref = 0, mag = 0;
    for (size_t i = 0; i < ra.size(); ++i) ref += ra[i] * rb[i], mag += std::abs(ra[i] * rb[i]);
    const Tensor out = dot(ah, bh);
    EXPECT_EQ(out.dtype(), dt);
    EXPECT_EQ(out.dim(), 0);
    EXPECT_NEAR(out.to(kFloat64).item<double>(), ref, rtol * mag) << dtype_name(dt);
  }
}

TEST(Dot, GradientsMatchFiniteDifferences) {
  manual_seed(4);
  // b is a strided (non-contiguous) slice.
  std::vector<Tensor> in = {randn({5}, TensorOptions(kFloat64)), slice(randn({10}, TensorOptions(kFloat64)), 0, 0, 10, 2)};
  for (Tensor& t : in) t = t.detach(), t.set_requires_grad(true);
  auto f = [](std::vector<Tensor>& v) { return dot(v[0], v[1]); };
  const Tensor probe = full({}, 1.7, TensorOptions(kFloat64));
  sum(mul(f(in), probe)).backward();
  for (size_t k = 0; k < 2; ++k) expect_close(as_doubles(in[k].grad()), numeric_grad(f, in, k, probe), 1e-6, 1e-8);
}

TEST(Dot, ArgumentErrors) {
  EXPECT_THROW(dot(randn({3}), randn({4})), Error);
  EXPECT_THROW(dot(randn({3, 1}), randn({3})), Error);
  EXPECT_THROW(dot(randn({3}), randn({3}).half()), Error);
  testing::expect_error([] { dot(randn({3}), randn({4})); },
                        "dot: expected two 1-D tensors of the same length, got [3] float32 cpu and [4]");
}

TEST(Addcmul, ForwardMatchesReferenceWithBroadcasting) {
  manual_seed(5);
  const Tensor s = randn({2, 3}), t1 = randn({3}), t2 = randn({2, 1});
  for (auto [dt, rtol] : {std::pair{kFloat64, 1e-12}, std::pair{kFloat32, 1e-6}, std::pair{kFloat16, 1e-3},
                          std::pair{kBFloat16, 8e-3}}) {
    const Tensor out = addcmul(s.to(dt), t1.to(dt), t2.to(dt), -0.75);
    EXPECT_EQ(out.dtype(), dt);
    ASSERT_EQ(out.shape(), (Shape{2, 3}));
    const std::vector<double> vs = as_doubles(s.to(dt)), v1 = as_doubles(t1.to(dt)), v2 = as_doubles(t2.to(dt));
    std::vector<double> ref(6);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) ref[i * 3 + j] = vs[i * 3 + j] - 0.75 * v1[j] * v2[i];
    // Rounded once to dt: within half an ulp of the exact value.
    expect_close(as_doubles(out), ref, rtol, 1e-12);
  }
  // Type promotion over all three inputs.
  EXPECT_EQ(addcmul(s.half(), t1.half(), t2).dtype(), kFloat32);
  EXPECT_EQ(addcmul(s.half(), t1.bfloat16(), t2.half()).dtype(), kFloat32);
}

TEST(Addcmul, GradientsMatchFiniteDifferences) {
  manual_seed(6);
  std::vector<Tensor> in = {randn({2, 3}, TensorOptions(kFloat64)), transpose(randn({3, 2}, TensorOptions(kFloat64)), 0, 1),
                            randn({3}, TensorOptions(kFloat64))};
  for (Tensor& t : in) t = t.detach(), t.set_requires_grad(true);
  auto f = [](std::vector<Tensor>& v) { return addcmul(v[0], v[1], v[2], 0.5); };
  const Tensor probe = randn({2, 3}, TensorOptions(kFloat64));
  sum(mul(f(in), probe)).backward();
  for (size_t k = 0; k < 3; ++k) expect_close(as_doubles(in[k].grad()), numeric_grad(f, in, k, probe), 1e-6, 1e-8);
}

TEST(Addcmul, ArgumentErrors) {
  EXPECT_THROW(addcmul(randn({3}), randn({4}), randn({3})), Error);
  EXPECT_THROW(addcmul(randn({3}), randint(0, 3, {3}), randn({3})), Error);
  EXPECT_THROW(addcmul(randn({3}), Tensor(), randn({3})), Error);
}

}  // namespace
}  // namespace mixtrain
