// softmax and log_softmax against an fp64 reference for every dtype and dim; large logits.
#include <cmath>

#include "ops/op_reference.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::testing::all_close;
using mt::testing::float_types;
using mt::testing::gradcheck;
using mt::testing::random_tensor;
using mt::testing::softmax_rows;
using mt::testing::to_doubles;
using mt::testing::tolerance_for;

TEST(Softmax, ForwardAndBackwardForEveryDtypeAndDim) {
  for (mt::DType dt : float_types()) {
    mt::Tensor x = random_tensor({6, 10}, dt, 13, -4, 4);
    const auto v = to_doubles(x);
    EXPECT_TRUE(all_close(mt::softmax(x, 1), softmax_rows(v, 6, 10, false), tolerance_for(dt))) << dt;
    EXPECT_TRUE(all_close(mt::log_softmax(x, -1), softmax_rows(v, 6, 10, true), tolerance_for(dt))) << dt;
    // dim 0 equals softmax of the transpose.
    EXPECT_TRUE(all_close(mt::softmax(x, 0), mt::softmax(x.t().contiguous(), 1).t(), tolerance_for(dt)));
    mt::Tensor with_dtype = mt::softmax(x, 1, mt::kFloat32);
    EXPECT_EQ(with_dtype.dtype(), mt::kFloat32);
  }
  mt::Tensor x = random_tensor({3, 4, 2}, mt::kFloat64, 14);
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::softmax(in[0], 1); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::log_softmax(in[0], 2); }, {x}));
}

TEST(Softmax, LargeLogitsStayFinite) {
  mt::Tensor x = mt::from_vector(std::vector<float>{1000, 1001, 999}, {1, 3});
  auto p = mt::softmax(x, 1).to_vector<float>();
  EXPECT_NEAR(p[0] + p[1] + p[2], 1.0f, 1e-6);
  EXPECT_TRUE(std::isfinite(mt::log_softmax(x, 1).to_vector<float>()[2]));
}
