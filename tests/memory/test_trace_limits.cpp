// Byte counts of the dry run never wrap: a meta storage that would take the meta bytes alive past
// 2^63 - 1, or one too large for the allocator's rounding, is refused when it is made (not
// counted as 0 bytes or wrapped), and the arena planner's sums are checked.
#include <limits>
#include <vector>

#include "mixtrain/memory/dry_run.h"
#include "mixtrain/memory/plan.h"
#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace mem = mixtrain::memory;
using mt::testing::expect_error;

namespace {
mt::TensorOptions meta_bool() { return mt::TensorOptions(mt::kBool).device(mt::Device::meta()); }
}  // namespace

TEST(TraceLimits, MetaBytesAlivePastInt64AreRefusedWhenMade) {
  // Of six meta tensors of 2^61 bytes, three fit; the fourth (2^63 bytes alive, which an int64
  // count wraps) is refused, as an allocation past a device's memory is.
  std::vector<mt::Tensor> live;
  for (int i = 0; i < 3; ++i) live.push_back(mt::empty({int64_t{1} << 61}, meta_bool()));
  for (int i = 3; i < 6; ++i)
    expect_error([&] { live.push_back(mt::empty({int64_t{1} << 61}, meta_bool())); }, {"meta", "2^63", "refusing"});
  EXPECT_EQ(live.size(), 3u);
  // Inside a dry run too; three alive before it fit, and the peak is theirs.
  expect_error([&] {
    (void)mem::dry_run(mt::Device::cpu(), [&] { live.push_back(mt::empty({int64_t{1} << 61}, meta_bool())); });
  }, "2^63");
  const mem::MemoryTrace three = mem::dry_run(mt::Device::cpu(), [&] { live.pop_back(); });
  EXPECT_EQ(three.peak_bytes(), 3 * (int64_t{1} << 61));
  // Freed storages no longer count: three fit again once they are gone.
  live.clear();
  for (int i = 0; i < 3; ++i) live.push_back(mt::empty({int64_t{1} << 61}, meta_bool()));
  EXPECT_EQ(live.size(), 3u);
}

TEST(TraceLimits, AMetaStorageTooLargeToRoundIsRefused) {
  // INT64_MAX - 10 bytes rounds up to 2^63, which no int64 holds: reported as a peak of 0 before.
  expect_error([] { (void)mt::empty({std::numeric_limits<int64_t>::max() - 10}, meta_bool()); },
               {"9223372036854775797", "2^63"});
  // Inside a dry run too, and the recording stays usable afterwards.
  expect_error([] {
    (void)mem::dry_run(mt::Device::cpu(), [] { (void)mt::empty({std::numeric_limits<int64_t>::max() - 10}, meta_bool()); });
  }, "2^63");
  const mem::MemoryTrace t = mem::dry_run(mt::Device::cpu(), [] { (void)mt::empty({1000}, meta_bool()); });
  EXPECT_EQ(t.peak_bytes(), 1024);
}

TEST(TraceLimits, ArenasPastInt64AreAnError) {
  // Two buffers of 3 * 2^61 bytes live together: 6 * 2^61 bytes of arena, which wrapped.
  const size_t big = size_t{3} << 61;
  const std::vector<mem::BufferLifetime> both{{big, 0, 2}, {big, 1, 3}};
  expect_error([&] { (void)mem::plan_arena(both); }, "2^63");
  expect_error([&] { (void)mem::lower_bound_bytes(both); }, {"lower_bound_bytes", "2^63"});
  // One after the other they share the arena: 3 * 2^61 bytes, representable.
  const std::vector<mem::BufferLifetime> apart{{big, 0, 1}, {big, 1, 2}};
  EXPECT_EQ(mem::plan_arena(apart).arena_bytes, big);
}
