// The examples' tabular preprocessing: a seeded train/test split and standardisation.
#include <cmath>
#include <set>

#include "common/dataset.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace ex = mixtrain::examples;

TEST(Tabular, SplitAndStandardize) {
  std::vector<float> x, y;
  for (int r = 0; r < 100; ++r) {
    x.push_back(static_cast<float>(r));
    y.push_back(static_cast<float>(2 * r));
  }
  const mt::data::TensorDataset d(mt::from_vector(x, {100, 1}), mt::from_vector(y, {100}));
  auto [train, test] = ex::train_test_split(d, 0.2, 7);
  EXPECT_EQ(train.size(), 80);
  EXPECT_EQ(test.size(), 20);
  const auto tx = train.data().to_vector<float>(), sx = test.data().to_vector<float>();
  std::set<float> all(tx.begin(), tx.end());
  all.insert(sx.begin(), sx.end());
  EXPECT_EQ(all.size(), 100u);
  const auto sy = test.target().to_vector<float>();
  for (size_t i = 0; i < sy.size(); ++i) EXPECT_EQ(sy[i], 2 * sx[i]);  // targets travel with their rows
  auto [train2, test2] = ex::train_test_split(d, 0.2, 7);
  EXPECT_EQ(test2.data().to_vector<float>(), sx) << "the split depends only on the seed";

  const mt::Tensor v = mt::from_vector(std::vector<float>{1, 10, 3, 10, 5, 10}, {3, 2});  // 2nd column constant
  const auto s = ex::Standardizer::fit(v);
  EXPECT_FLOAT_EQ(s.mean[0], 3.0f);
  EXPECT_FLOAT_EQ(s.std[0], std::sqrt(8.0f / 3.0f));
  EXPECT_FLOAT_EQ(s.std[1], 1.0f);
  const auto out = s.apply(v).to_vector<float>();
  EXPECT_FLOAT_EQ(out[0], -2.0f / std::sqrt(8.0f / 3.0f));
  EXPECT_FLOAT_EQ(out[1], 0.0f);
  mt::testing::expect_error([&] { (void)s.apply(mt::from_vector(std::vector<float>{1, 2, 3}, {1, 3})); },
                            "fitted on 2 columns");
}
