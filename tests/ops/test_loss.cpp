// mse_loss, cross_entropy and the binary cross entropies against fp64 references; bad inputs.
#include <cmath>

#include "ops/op_reference.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using mt::testing::all_close;
using mt::testing::expect_error;
using mt::testing::float_types;
using mt::testing::gradcheck;
using mt::testing::random_tensor;
using mt::testing::softmax_rows;
using mt::testing::to_doubles;
using mt::testing::tolerance_for;

TEST(Loss, MseCrossEntropyBceMatchReferences) {
  for (mt::DType dt : float_types()) {
    mt::Tensor p = random_tensor({5, 3}, dt, 91), t = random_tensor({5, 3}, dt, 92);
    const auto pv = to_doubles(p), tv = to_doubles(t);
    double mse = 0, bce = 0;
    for (size_t i = 0; i < pv.size(); ++i) {
      mse += (pv[i] - tv[i]) * (pv[i] - tv[i]);
      const double sig = 1 / (1 + std::exp(-pv[i]));
      bce += -(tv[i] * std::log(sig) + (1 - tv[i]) * std::log(1 - sig));
    }
    EXPECT_TRUE(all_close(F::mse_loss(p, t), std::vector<double>{mse / 15}, tolerance_for(dt))) << dt;
    EXPECT_TRUE(all_close(F::binary_cross_entropy_with_logits(p, t), std::vector<double>{bce / 15}, tolerance_for(dt))) << dt;

    mt::Tensor logits = random_tensor({4, 6}, dt, 93, -3, 3);
    mt::Tensor labels = mt::from_vector(std::vector<int64_t>{0, 5, 2, 2}, {4});
    const auto lv = to_doubles(logits);
    const auto lp = softmax_rows(lv, 4, 6, true);
    const int64_t lab[] = {0, 5, 2, 2};
    double ce = 0;
    for (int i = 0; i < 4; ++i) ce -= lp[i * 6 + lab[i]];
    EXPECT_TRUE(all_close(F::cross_entropy(logits, labels), std::vector<double>{ce / 4}, tolerance_for(dt))) << dt;
  }
  mt::Tensor labels = mt::from_vector(std::vector<int64_t>{1, 0, 2}, {3});
  EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& in) { return F::cross_entropy(in[0], labels); },
                        {random_tensor({3, 4}, mt::kFloat64, 94)}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return F::mse_loss(in[0], in[1]); },
                        {random_tensor({3, 2}, mt::kFloat64, 95), random_tensor({3, 2}, mt::kFloat64, 96)}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return F::binary_cross_entropy_with_logits(in[0], in[1]); },
                        {random_tensor({3, 2}, mt::kFloat64, 97), random_tensor({3, 2}, mt::kFloat64, 98, 0, 1)}));
}

TEST(Loss, BadInputsRaiseClearErrors) {
  mt::Tensor logits = mt::randn({3, 4});
  expect_error([&] { F::cross_entropy(logits, mt::from_vector(std::vector<int64_t>{0, 7, 1}, {3})); },
               "out of range for 4 classes");
  EXPECT_THROW(F::cross_entropy(logits, mt::from_vector(std::vector<float>{0, 1, 1}, {3})), mt::Error);
  EXPECT_THROW(F::cross_entropy(logits, mt::from_vector(std::vector<int64_t>{0, 1}, {2})), mt::Error);
  EXPECT_THROW(F::mse_loss(mt::randn({3, 2}), mt::randn({2, 3})), mt::Error);
  expect_error([] { mt::matmul(mt::randn({2, 3}), mt::randn({4, 5})); },
               "matmul: shapes [2, 3] and [4, 5] cannot be multiplied");
  EXPECT_THROW(mt::matmul(mt::randn({2, 3}), mt::randn({3, 2}).to(mt::kFloat16)), mt::Error);
  EXPECT_THROW(mt::linear(mt::randn({2, 3}), mt::randn({4, 5})), mt::Error);
}
