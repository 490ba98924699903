// GradScaler state that once slipped through: a hysteresis tracker past the scaler's hysteresis
// (which postpones backing off) and deep JSON handed to load_state_dict.
#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::testing::expect_error;

TEST(ScalerStateLimits, HysteresisTrackerIsBoundedByHysteresis) {
  mt::amp::GradScaler s(mt::amp::GradScalerOptions().hysteresis(3));
  const nlohmann::json good = s.state_dict();
  ASSERT_TRUE(good.contains("_hysteresis_tracker"));
  for (int64_t v : {0, 1, 3}) {
    nlohmann::json j = good;
    j["_hysteresis_tracker"] = v;
    s.load_state_dict(j);
    EXPECT_EQ(s.get_hysteresis_tracker(), v);
  }
  for (int64_t v : {int64_t{4}, int64_t{2147483647}, int64_t{-1}}) {
    nlohmann::json j = good;
    j["_hysteresis_tracker"] = v;
    j["scale"] = 1024.0;
    expect_error([&] { s.load_state_dict(j); }, {"_hysteresis_tracker", "[0, 3]"});
    EXPECT_EQ(s.get_hysteresis_tracker(), 3);
    EXPECT_NE(s.get_scale(), 1024.0);  // nothing applied
  }
}

TEST(ScalerStateLimits, DeepStateIsRejected) {
  mt::amp::GradScaler s;
  nlohmann::json j = s.state_dict();
  mt::testing::nest_arrays_into(j["scale"], 100000);
  expect_error([&] { s.load_state_dict(j); }, {"GradScaler.load_state_dict", "deeper"});
}
