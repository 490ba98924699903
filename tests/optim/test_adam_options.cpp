// Adam's and AdamW's options share one declaration (a CRTP base): each setter still returns the
// option type it was called on, so a chain keeps its type and a chained AdamW configuration
// cannot silently become Adam's; the two keep their own weight_decay defaults and JSON round trip.
#include <type_traits>

#include <nlohmann/json.hpp>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace optim = mixtrain::optim;

static_assert(std::is_same_v<decltype(optim::AdamWOptions().lr(1e-3).weight_decay(0.1)), optim::AdamWOptions&>);
static_assert(std::is_same_v<decltype(optim::AdamOptions().betas({0.8, 0.9}).amsgrad(true)), optim::AdamOptions&>);
// Neither converts to the other: AdamW(params, AdamOptions()) would apply L2 weight decay.
static_assert(!std::is_convertible_v<optim::AdamOptions, optim::AdamWOptions>);
static_assert(!std::is_convertible_v<optim::AdamWOptions, optim::AdamOptions>);

TEST(AdamOptions, EachKeepsItsDefaultsAndChainsOnItsOwnType) {
  EXPECT_EQ(optim::AdamOptions().weight_decay(), 0.0);
  EXPECT_EQ(optim::AdamWOptions().weight_decay(), 1e-2);  // PyTorch's AdamW default
  EXPECT_EQ(optim::AdamWOptions(0.5).lr(), 0.5);
  const optim::AdamWOptions o = optim::AdamWOptions().lr(2e-3).weight_decay(0.1).eps(1e-6).master_weights(true);
  EXPECT_EQ(o.lr(), 2e-3);
  EXPECT_EQ(o.weight_decay(), 0.1);
  EXPECT_EQ(o.eps(), 1e-6);
  EXPECT_TRUE(o.get_master_weights());
  // clone() copies the deriving type, not the shared base.
  const std::unique_ptr<optim::OptimizerOptions> copy = o.clone();
  ASSERT_NE(dynamic_cast<const optim::AdamWOptions*>(copy.get()), nullptr);
  EXPECT_EQ(copy->to_json(), o.to_json());
  optim::AdamWOptions back;
  back.from_json(o.to_json(), "test");
  EXPECT_EQ(back.to_json(), o.to_json());
  EXPECT_EQ(copy->get_lr(), 2e-3);
  copy->set_momentum(0.7);
  EXPECT_EQ(static_cast<const optim::AdamWOptions&>(*copy).betas().first, 0.7);
}
