// matmul and linear against an fp64 reference for every dtype and layout, batched and vector
// forms, half accumulation in fp32; gradients against finite differences; errors.
#include <cmath>

#include "ops/op_reference.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::testing::all_close;
using mt::testing::float_types;
using mt::testing::gradcheck;
using mt::testing::matmul_ref;
using mt::testing::random_tensor;
using mt::testing::to_doubles;
using mt::testing::tolerance_for;

TEST(Matmul, EveryDtypeAndLayoutMatchesReference) {
  for (mt::DType dt : float_types()) {
    mt::Tensor a = random_tensor({17, 23}, dt, 61), b = random_tensor({23, 9}, dt, 62);
    const auto ref = matmul_ref(to_doubles(a), to_doubles(b), 17, 23, 9);
    // Inner products of 23 terms: fp32 accumulation then one rounding.
    mt::testing::Tolerance tol = tolerance_for(dt);
    EXPECT_TRUE(all_close(mt::matmul(a, b), ref, tol)) << dt;
    EXPECT_TRUE(all_close(mt::matmul(a.t().contiguous().t(), b.t().contiguous().t()), ref, tol)) << dt;
    mt::Tensor out = mt::matmul(a, b);
    EXPECT_EQ(out.dtype(), dt);
  }
}

TEST(Matmul, HalfAccumulatesInFp32AndRoundsOnce) {
  // 4096 products of 1 * 1: an fp16 accumulator would stop at 2048; fp32 accumulation gives 4096
  // exactly, representable in fp16.
  mt::Tensor a = mt::ones({1, 4096}, mt::TensorOptions(mt::kFloat16));
  mt::Tensor b = mt::ones({4096, 1}, mt::TensorOptions(mt::kFloat16));
  EXPECT_EQ(mt::matmul(a, b).item<float>(), 4096.0f);
}

TEST(Matmul, BatchedBroadcastAndVectorForms) {
  mt::Tensor a = random_tensor({2, 3, 4, 5}, mt::kFloat64, 71), b = random_tensor({3, 5, 6}, mt::kFloat64, 72);
  mt::Tensor c = mt::matmul(a, b);
  ASSERT_EQ(c.shape(), (mt::Shape{2, 3, 4, 6}));
  const auto av = to_doubles(a), bv = to_doubles(b), cv = to_doubles(c);
  for (int i = 0; i < 2; ++i)
    for (int h = 0; h < 3; ++h) {
      std::vector<double> as(av.begin() + (i * 3 + h) * 20, av.begin() + (i * 3 + h + 1) * 20);
      std::vector<double> bs(bv.begin() + h * 30, bv.begin() + (h + 1) * 30);
      const auto r = matmul_ref(as, bs, 4, 5, 6);
      for (int k = 0; k < 24; ++k) EXPECT_NEAR(cv[(i * 3 + h) * 24 + k], r[k], 1e-12);
    }
  EXPECT_EQ(mt::matmul(random_tensor({5}, mt::kFloat64, 1), random_tensor({5}, mt::kFloat64, 2)).dim(), 0);
  EXPECT_EQ(mt::matmul(random_tensor({4, 5}, mt::kFloat64, 1), random_tensor({5}, mt::kFloat64, 2)).shape(), (mt::Shape{4}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::matmul(in[0], in[1]); },
                        {random_tensor({2, 3, 4}, mt::kFloat64, 3), random_tensor({4, 2}, mt::kFloat64, 4)}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::bmm(in[0], in[1].transpose(1, 2)); },
                        {random_tensor({2, 3, 4}, mt::kFloat64, 5), random_tensor({2, 5, 4}, mt::kFloat64, 6)}));
}

TEST(Linear, ForwardMatchesReferenceAndGradientsCheck) {
  for (mt::DType dt : float_types()) {
    mt::Tensor x = random_tensor({6, 8}, dt, 81), w = random_tensor({4, 8}, dt, 82), b = random_tensor({4}, dt, 83);
    const auto xv = to_doubles(x), wv = to_doubles(w), bv = to_doubles(b);
    std::vector<double> ref(24);
    for (int i = 0; i < 6; ++i)
      for (int o = 0; o < 4; ++o) {
        double s = bv[o];
        for (int k = 0; k < 8; ++k) s += xv[i * 8 + k] * wv[o * 8 + k];
        ref[i * 4 + o] = s;
      }
    EXPECT_TRUE(all_close(mt::linear(x, w, b), ref, tolerance_for(dt))) << dt;
  }
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::linear(in[0], in[1], in[2]); },
                        {random_tensor({2, 3, 5}, mt::kFloat64, 1), random_tensor({4, 5}, mt::kFloat64, 2),
                         random_tensor({4}, mt::kFloat64, 3)}));
}
