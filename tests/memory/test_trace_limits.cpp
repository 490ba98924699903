// Byte counts of the dry run never wrap: a trace whose live bytes pass 2^63 - 1 is an Error from
// the summary that would have to hold them, and a meta storage too large for the allocator's
// rounding is refused when it is made, not counted as 0 bytes.
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

TEST(TraceLimits, LiveBytesPastInt64AreAnErrorNotAWrappedPeak) {
  std::vector<mt::Tensor> live;
  const mem::MemoryTrace trace = mem::dry_run(mt::Device::cpu(), [&] {
    for (int i = 0; i < 5; ++i) live.push_back(mt::empty({int64_t{1} << 61}, meta_bool()));
  });
  ASSERT_EQ(trace.events.size(), 5u);
  // 5 * 2^61 bytes alive at once: the peak was reported as 3 * 2^61 (wrapped).
  expect_error([&] { (void)trace.peak_bytes(); }, {"peak_bytes", "2^63"});
  expect_error([&] { (void)trace.persistent_bytes(); }, {"persistent_bytes", "2^63"});
  expect_error([&] { (void)trace.peak_by_role(); }, "2^63");
  expect_error([&] { (void)trace.peak_by_phase(); }, "2^63");
  expect_error([&] { (void)trace.allocated_by_role(); }, "2^63");
  // Three of them fit (four would be 2^63): alive before the next dry run, the peak is theirs.
  live.resize(3);
  const mem::MemoryTrace three = mem::dry_run(mt::Device::cpu(), [&] { live.pop_back(); });
  EXPECT_EQ(three.peak_bytes(), 3 * (int64_t{1} << 61));
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
