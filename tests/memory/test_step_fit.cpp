// Steps in a dry run (mark_step, last_step, dry_run_step), the caching allocator's reserved bytes
// replayed from a trace, the batch-fit search, and byte sizes as people write them.
#include <algorithm>
#include <cmath>

#include "mixtrain/memory/batch_fit.h"
#include "mixtrain/memory/caching_allocator.h"
#include "mixtrain/memory/device_memory.h"
#include "mixtrain/memory/dry_run.h"
#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace mem = mixtrain::memory;
using mt::Tensor;

namespace {

Tensor meta_bytes(int64_t n) { return mt::empty({n}, mt::TensorOptions(mt::kBool).device(mt::Device::meta())); }

}  // namespace

// A buffer made in the first step and kept is alive when the second begins: last_step lists it
// first, as an Alloc marked before_step with the role the whole recording gave it; the second
// step's own events follow as recorded.
TEST(DryRunSteps, LastStepStartsWithWhatTheEarlierStepsLeftAlive) {
  Tensor kept;
  const mem::MemoryTrace both = mem::dry_run(mt::Device::cpu(), [&] {
    Tensor scratch = meta_bytes(1000);
    kept = meta_bytes(3000);
    scratch = Tensor();
    mem::mark_step();
    Tensor t = meta_bytes(5000);
  });
  ASSERT_EQ(both.step_starts.size(), 1u);
  const size_t start = both.step_starts[0];
  ASSERT_EQ(start, 3u);  // alloc 1000, alloc 3000, free 1000
  const mem::MemoryTrace second = mem::last_step(both);
  ASSERT_EQ(second.events.size(), 3u);
  EXPECT_TRUE(second.events[0].before_step);
  EXPECT_EQ(second.events[0].kind, mem::MemoryEvent::Kind::Alloc);
  EXPECT_EQ(second.events[0].requested, 3000u);
  EXPECT_EQ(second.events[0].role, both.events[1].role);
  for (size_t i = 1; i < second.events.size(); ++i) {
    EXPECT_FALSE(second.events[i].before_step);
    EXPECT_EQ(second.events[i].buffer, both.events[start + i - 1].buffer);
    EXPECT_EQ(second.events[i].bytes, mem::CachingAllocator::round_size(5000));
  }
  EXPECT_EQ(second.peak_bytes(), static_cast<int64_t>(mem::CachingAllocator::round_size(3000) +
                                                     mem::CachingAllocator::round_size(5000)));
  // Without a mark the last step is the whole trace; outside a recording mark_step does nothing.
  mem::mark_step();
  const mem::MemoryTrace one = mem::dry_run(mt::Device::cpu(), [] { Tensor t = meta_bytes(700); });
  EXPECT_TRUE(one.step_starts.empty());
  EXPECT_EQ(mem::last_step(one).events.size(), one.events.size());
}

// dry_run_step is two runs with a mark between, the second returned: a step that keeps state
// from its first run (an optimizer's moments) finds it alive in the second.
TEST(DryRunSteps, DryRunStepMeasuresTheSecondRun) {
  std::vector<Tensor> state;
  int runs = 0;
  const mem::MemoryTrace t = mem::dry_run_step(mt::Device::cpu(), [&] {
    ++runs;
    if (state.empty()) state.push_back(meta_bytes(4096));
    Tensor step_buffer = meta_bytes(2048);
  });
  EXPECT_EQ(runs, 2);
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_TRUE(t.events[0].before_step);
  EXPECT_EQ(t.events[0].requested, 4096u);
  EXPECT_EQ(t.persistent_bytes(), static_cast<int64_t>(mem::CachingAllocator::round_size(4096)));
  EXPECT_TRUE(mt::testing::error_contains(mt::testing::error_of([] { mem::dry_run_step(mt::Device::cpu(), {}); }),
                                          {"dry_run_step"}));
}

// The replay serves the trace through a real CachingAllocator: small requests share one small
// segment, a large one takes a segment of its own, and what was freed is reused.
TEST(DryRunSteps, ReplayedReservedBytesFollowTheAllocatorsSegments) {
  const mem::MemoryTrace small = mem::dry_run(mt::Device::cpu(), [] {
    Tensor a = meta_bytes(1000), b = meta_bytes(2000);
  });
  EXPECT_EQ(mem::replay_reserved_bytes(small), static_cast<int64_t>(mem::CachingAllocator::segment_size(512)));
  const int64_t big = int64_t{3} << 20;
  const mem::MemoryTrace reuse = mem::dry_run(mt::Device::cpu(), [&] {
    { Tensor a = meta_bytes(big); }
    Tensor b = meta_bytes(big);
  });
  const int64_t one = static_cast<int64_t>(
      mem::CachingAllocator::segment_size(mem::CachingAllocator::round_size(static_cast<size_t>(big))));
  EXPECT_EQ(mem::replay_reserved_bytes(reuse), one);
  EXPECT_GE(mem::replay_reserved_bytes(reuse), reuse.peak_bytes());
}

// The search finds the exact largest batch under the limit, for straight and curved peaks, with
// O(log) probes; it says when the smallest batch does not fit and when it stopped at max_batch.
TEST(BatchFit, FindsTheLargestBatchUnderTheLimit) {
  const auto linear = [](int64_t b) { return 1000 + 37 * b; };
  const auto curved = [](int64_t b) { return 5000 + 3 * b + b * b / 64; };
  for (const int64_t limit : {int64_t{1100}, int64_t{40000}, int64_t{12345678}}) {
    for (const auto& peak : {std::function<int64_t(int64_t)>(linear), std::function<int64_t(int64_t)>(curved)}) {
      const mem::BatchFit f = mem::fit_batch(peak, limit, 2);
      int64_t expect = 2;
      while (peak(expect + 1) <= limit) ++expect;
      SCOPED_TRACE(limit);
      if (peak(2) > limit) {
        EXPECT_FALSE(f.fits);
        EXPECT_EQ(f.over_batch, 2);
        continue;
      }
      EXPECT_TRUE(f.fits);
      EXPECT_EQ(f.batch, expect);
      EXPECT_EQ(f.peak_bytes, peak(expect));
      EXPECT_EQ(f.over_batch, expect + 1);
      EXPECT_EQ(f.over_peak_bytes, peak(expect + 1));
      EXPECT_FALSE(f.capped);
      EXPECT_LE(f.dry_runs, 2 + 2 * static_cast<int>(std::ceil(std::log2(static_cast<double>(expect) + 1))));
    }
  }
  const mem::BatchFit none = mem::fit_batch(linear, 500, 2);
  EXPECT_FALSE(none.fits);
  EXPECT_EQ(none.batch, 2);
  EXPECT_EQ(none.dry_runs, 1);
  const mem::BatchFit capped = mem::fit_batch(linear, int64_t{1} << 40, 2, 100);
  EXPECT_TRUE(capped.fits);
  EXPECT_TRUE(capped.capped);
  EXPECT_EQ(capped.batch, 100);
  EXPECT_EQ(capped.over_batch, 0);
  EXPECT_THROW(mem::fit_batch(linear, 100, 0), mt::Error);
  EXPECT_THROW(mem::fit_batch(linear, 100, 8, 4), mt::Error);
}

TEST(ByteSizes, ParseStrictlyAndNameWhereTheyCameFrom) {
  EXPECT_EQ(mem::parse_bytes("8GiB", "--fit"), int64_t{8} << 30);
  EXPECT_EQ(mem::parse_bytes("512MiB", "--fit"), int64_t{512} << 20);
  EXPECT_EQ(mem::parse_bytes("1.5KiB", "--fit"), 1536);
  EXPECT_EQ(mem::parse_bytes("2GB", "--fit"), 2000000000);
  EXPECT_EQ(mem::parse_bytes("3kB", "--fit"), 3000);
  EXPECT_EQ(mem::parse_bytes("4096", "--fit"), 4096);
  EXPECT_EQ(mem::parse_bytes("4096B", "--fit"), 4096);
  for (const char* bad : {"", "GiB", "8 GiB", "8gib", "-1", "0", "1.5", "1..5MiB", ".5MiB", "8GiBs", "1e9", "0.1B",
                          "5000000TiB"}) {
    const std::string what = mt::testing::error_of([&] { mem::parse_bytes(bad, "MIXTRAIN_RANK_MEMORY"); });
    EXPECT_TRUE(mt::testing::error_contains(what, {"MIXTRAIN_RANK_MEMORY", std::string("'") + bad + "'"})) << what;
  }
}

TEST(ByteSizes, FormatInTheLargestUnitUnder1024) {
  EXPECT_EQ(mem::format_bytes(0), "0 B");
  EXPECT_EQ(mem::format_bytes(1023), "1023 B");
  EXPECT_EQ(mem::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(mem::format_bytes(int64_t{48} << 20), "48.00 MiB");
  EXPECT_EQ(mem::format_bytes(int64_t{3} << 30), "3.00 GiB");
  EXPECT_EQ(mem::format_bytes(int64_t{5} << 50), "5120.00 TiB");
}
