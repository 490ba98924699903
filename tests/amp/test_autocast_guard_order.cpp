// Heap-allocated autocast guards destroyed out of order (which once left autocast on): the
// newest live guard of each device decides, and once all are gone the state is the one before.
#include <memory>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;

TEST(AutocastGuardOrder, HeapGuardsDestroyedOutOfOrderRestoreTheOuterState) {
  using mt::DeviceType;
  ASSERT_FALSE(mt::amp::is_autocast_enabled(DeviceType::CPU));
  {
    auto outer = std::make_unique<mt::amp::AutocastGuard>(DeviceType::CPU, mt::kBFloat16, true);
    auto inner = std::make_unique<mt::amp::AutocastGuard>(DeviceType::CPU, mt::kFloat16, false, false);
    EXPECT_FALSE(mt::amp::is_autocast_enabled(DeviceType::CPU));
    outer.reset();  // out of order: the inner guard's setting stays in force
    EXPECT_FALSE(mt::amp::is_autocast_enabled(DeviceType::CPU));
    EXPECT_EQ(mt::amp::autocast_dtype(DeviceType::CPU), mt::kFloat16);
    inner.reset();  // once left autocast on: it restored the outer guard's "on"
  }
  EXPECT_FALSE(mt::amp::is_autocast_enabled(DeviceType::CPU));
  EXPECT_EQ(mt::amp::autocast_dtype(DeviceType::CPU), mt::kFloat16);
  EXPECT_TRUE(mt::amp::is_autocast_cache_enabled());

  // Three guards, every destruction order: the state afterwards is the state before.
  int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (auto& order : orders) {
    std::unique_ptr<mt::amp::AutocastGuard> g[3];
    g[0] = std::make_unique<mt::amp::AutocastGuard>(DeviceType::CPU, mt::kBFloat16, true);
    g[1] = std::make_unique<mt::amp::AutocastGuard>(DeviceType::CUDA, mt::kBFloat16, true, false);
    g[2] = std::make_unique<mt::amp::AutocastGuard>(DeviceType::CPU, mt::kFloat16, false);
    // While guards remain, the newest guard of each device decides.
    for (int k = 0; k < 3; ++k) {
      g[order[k]].reset();
      int newest_cpu = -1, newest_cuda = -1;
      for (int i = 0; i < 3; ++i)
        if (g[i]) (i == 1 ? newest_cuda : newest_cpu) = i;
      EXPECT_EQ(mt::amp::is_autocast_enabled(DeviceType::CPU), newest_cpu == 0);
      EXPECT_EQ(mt::amp::is_autocast_enabled(DeviceType::CUDA), newest_cuda == 1);
      if (newest_cpu >= 0)
        EXPECT_EQ(mt::amp::autocast_dtype(DeviceType::CPU), newest_cpu == 0 ? mt::kBFloat16 : mt::kFloat16);
    }
    EXPECT_FALSE(mt::amp::is_autocast_enabled(DeviceType::CPU));
    EXPECT_FALSE(mt::amp::is_autocast_enabled(DeviceType::CUDA));
    EXPECT_EQ(mt::amp::autocast_dtype(DeviceType::CPU), mt::kFloat16);
    EXPECT_TRUE(mt::amp::is_autocast_cache_enabled());
  }
}
