// nn::init::SkipInitGuard: initialisers under it keep checking their arguments but neither write
// the tensor nor draw from the default generator; the guard nests and restores on exit.
#include <vector>

#include "support/testing.h"

namespace mt = mixtrain;
namespace init = mixtrain::nn::init;

TEST(SkipInitGuard, InitialisersLeaveTensorsAndTheGeneratorAlone) {
  mt::manual_seed(11);
  const std::vector<float> expected_draw = mt::rand({5}).to_vector<float>();
  mt::manual_seed(11);
  mt::Tensor w = mt::full({4, 3}, 7.0);
  {
    init::SkipInitGuard skip;
    EXPECT_TRUE(init::is_init_skipped());
    init::kaiming_uniform_(w, 2.0);
    init::xavier_normal_(w);
    init::normal_(w, 0.0, 1.0);
    init::zeros_(w);
    init::ones_(w);
    // The arguments are still checked.
    EXPECT_THROW(init::uniform_(w, 1.0, 0.0), mt::Error);
    EXPECT_THROW(init::normal_(mt::full({2}, 1, mt::TensorOptions(mt::kInt64)), 0.0, 1.0), mt::Error);
    {
      init::SkipInitGuard nested;
    }
    EXPECT_TRUE(init::is_init_skipped());  // the inner guard restores the outer one's state
  }
  EXPECT_FALSE(init::is_init_skipped());
  for (const float v : w.to_vector<float>()) EXPECT_EQ(v, 7.0f);
  EXPECT_EQ(mt::rand({5}).to_vector<float>(), expected_draw);  // nothing was drawn
  // Outside the guard the initialisers write again.
  init::zeros_(w);
  for (const float v : w.to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

// A module built under the guard has the same parameters (names, shapes, dtypes) as one built
// without it: only their values are left unset.
TEST(SkipInitGuard, ModulesBuiltUnderItHaveTheSameParameters) {
  mt::nn::Linear a(6, 4);
  const auto b = [] {
    init::SkipInitGuard skip;
    return mt::nn::Linear(6, 4);
  }();
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_EQ(pa[i].second.shape(), pb[i].second.shape());
    EXPECT_EQ(pa[i].second.dtype(), pb[i].second.dtype());
  }
}
