// Static plans at the allocator level (memory/step_plan.h): a recorded step replays from its
// arena with no search and no backing allocation, deviations fall back and are counted, escaped
// buffers keep their bytes, and bad plans are refused without leaving anything behind.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "memory/counting_backing.h"
#include "mixtrain/base/error.h"
#include "mixtrain/memory/plan_cache.h"
#include "mixtrain/memory/step_plan.h"

namespace mixtrain::memory {
namespace {

using testing::CountingBackingAllocator;
using testing::KiB;

// A step: two activations, a temporary, a kept result; each buffer is filled with a pattern and
// checked before it is freed, so an overlap of live buffers shows as a corrupted pattern.
struct Step {
  CachingAllocator& a;
  size_t first = 1000;
  bool keep_temp = false;  // let the temporary escape the step
  void* escaped = nullptr;

  void* alloc(size_t n, unsigned char fill) {
    void* p = a.allocate(n);
    std::memset(p, fill, n);
    return p;
  }
  static void check(void* p, size_t n, unsigned char fill) {
    const auto* c = static_cast<unsigned char*>(p);
    for (size_t i = 0; i < n; ++i)
      if (c[i] != fill) {
        ADD_FAILURE() << "byte " << i << " of a live buffer was overwritten";
        return;
      }
  }
  void* operator()() {
    void* x = alloc(first, 1);
    void* h = alloc(3 * KiB, 2);
    check(x, first, 1);
    a.deallocate(x);
    void* t = alloc(800, 3);
    void* out = alloc(100, 4);  // kept: outlives the step
    check(h, 3 * KiB, 2);
    a.deallocate(h);
    check(t, 800, 3);
    if (keep_temp) escaped = t;
    else a.deallocate(t);
    return out;
  }
};

TEST(StepPlan, ReplaysInStepRequestsFromTheArena) {
  CountingBackingAllocator backing;
  {
    CachingAllocator a(backing, Device::cpu());
    Step step{a};
    std::vector<void*> kept;
    StepPlan plan = plan_step(a, [&] { kept.push_back(step()); });
    EXPECT_EQ(plan.num_requests(), 4);
    EXPECT_EQ(plan.num_planned(), 3);
    EXPECT_EQ(plan.lower_bound_bytes(), 4096u);  // 3 KiB + 1 KiB, then 3 KiB + 1 KiB (800 rounded)
    EXPECT_EQ(plan.arena_bytes(), 4096u);
    const Stats before = a.stats();
    const int64_t backing_before = backing.allocs();
    for (int i = 0; i < 5; ++i) kept.push_back(plan.run(step));
    const Stats after = a.stats();
    EXPECT_EQ(after.num_plan_hits - before.num_plan_hits, 15);
    EXPECT_EQ(after.num_plan_misses, 0);
    EXPECT_EQ(after.num_backing_allocs, before.num_backing_allocs);
    EXPECT_EQ(backing.allocs(), backing_before);
    EXPECT_EQ(after.num_searches - before.num_searches, 5) << "only the kept results search the pools";
    // The kept results are distinct caching-allocator blocks with their values.
    for (size_t i = 0; i < kept.size(); ++i) {
      Step::check(kept[i], 100, 4);
      for (size_t j = i + 1; j < kept.size(); ++j) EXPECT_NE(kept[i], kept[j]);
    }
    for (void* p : kept) a.deallocate(p);
  }
  EXPECT_EQ(backing.held(), 0u);
}

TEST(StepPlan, ADifferentRequestFallsBackForTheRestOfTheStep) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  Step step{a};
  std::vector<void*> kept;
  StepPlan plan = plan_step(a, [&] { kept.push_back(step()); });
  Step other{a};
  other.first = 5000;  // the last partial batch: the first request differs
  const Stats before = a.stats();
  kept.push_back(plan.run(other));
  Stats after = a.stats();
  EXPECT_EQ(after.num_plan_misses, 1);
  EXPECT_EQ(after.num_plan_hits, before.num_plan_hits);
  // The plan's steps still replay afterwards.
  kept.push_back(plan.run(step));
  after = a.stats();
  EXPECT_EQ(after.num_plan_misses, 1);
  EXPECT_EQ(after.num_plan_hits - before.num_plan_hits, 3);

  // A deviation in the middle: the arena buffers already handed out stay valid to their free.
  struct Reordered {
    CachingAllocator& a;
    void* operator()() {
      void* x = a.allocate(1000);
      std::memset(x, 7, 1000);
      void* h = a.allocate(2 * KiB);  // differs: 3 KiB was recorded
      std::memset(h, 8, 2 * KiB);
      Step::check(x, 1000, 7);
      a.deallocate(x);
      a.deallocate(h);
      return a.allocate(100);
    }
  };
  kept.push_back(plan.run(Reordered{a}));
  after = a.stats();
  EXPECT_EQ(after.num_plan_misses, 2);
  EXPECT_EQ(after.num_plan_hits - before.num_plan_hits, 4);
  for (void* p : kept) a.deallocate(p);
  EXPECT_EQ(a.stats().allocated_bytes, static_cast<int64_t>(plan.arena_bytes() + CachingAllocator::kMinBlockSize));
}

TEST(StepPlan, AFreeOutOfOrderIsAMiss) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  auto recorded = [&] {
    void* x = a.allocate(1000);
    void* y = a.allocate(1000);
    a.deallocate(x);
    void* z = a.allocate(1000);  // takes x's bytes
    a.deallocate(y);
    a.deallocate(z);
  };
  StepPlan plan = plan_step(a, recorded);
  EXPECT_EQ(plan.arena_bytes(), 2048u);
  // Freeing y instead of x before z: z must not get x's bytes while x is live.
  plan.run([&] {
    void* x = a.allocate(1000);
    std::memset(x, 1, 1000);
    void* y = a.allocate(1000);
    a.deallocate(y);
    void* z = a.allocate(1000);
    std::memset(z, 2, 1000);
    Step::check(x, 1000, 1);
    a.deallocate(x);
    a.deallocate(z);
  });
  EXPECT_EQ(a.stats().num_plan_misses, 1);
}

TEST(StepPlan, OptimizerStateOfTheFirstStepIsPassedOver) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  std::vector<void*> state;
  auto step = [&] {
    void* act = a.allocate(4 * KiB);
    if (state.empty()) {  // lazily created state, as Adam's moments on its first step
      state.push_back(a.allocate(2 * KiB));
      state.push_back(a.allocate(2 * KiB));
    }
    void* tmp = a.allocate(2 * KiB);
    a.deallocate(tmp);
    a.deallocate(act);
  };
  StepPlan plan = plan_step(a, step);
  EXPECT_EQ(plan.num_requests(), 4);
  EXPECT_EQ(plan.num_planned(), 2);
  // The temporary has the state's size: the first replay cannot tell them apart, misses, and
  // the plan adopts that step; from then on every step replays.
  plan.run(step);
  EXPECT_EQ(a.stats().num_plan_misses, 1);
  EXPECT_EQ(plan.num_requests(), 2);
  const Stats before = a.stats();
  for (int i = 0; i < 3; ++i) plan.run(step);
  EXPECT_EQ(a.stats().num_plan_misses, 1);
  EXPECT_EQ(a.stats().num_plan_hits - before.num_plan_hits, 6);
  EXPECT_EQ(a.stats().num_searches, before.num_searches);
  EXPECT_EQ(a.stats().num_backing_allocs, before.num_backing_allocs);
  for (void* p : state) a.deallocate(p);
}

TEST(StepPlan, AnEscapedBufferKeepsItsBytes) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  Step step{a};
  std::vector<void*> kept;
  StepPlan plan = plan_step(a, [&] { kept.push_back(step()); });
  Step leaky{a};
  leaky.keep_temp = true;
  kept.push_back(plan.run(leaky));
  EXPECT_EQ(a.stats().num_plan_misses, 1);
  ASSERT_NE(leaky.escaped, nullptr);
  // The next step takes a new arena; the escaped buffer keeps its pattern through it.
  kept.push_back(plan.run(step));
  EXPECT_EQ(a.stats().num_plan_misses, 1);
  Step::check(leaky.escaped, 800, 3);
  const int64_t allocated = a.stats().allocated_bytes;
  a.deallocate(leaky.escaped);  // the last buffer of the retired arena: the arena goes too
  EXPECT_EQ(a.stats().allocated_bytes,
            allocated - static_cast<int64_t>(plan.arena_bytes() + CachingAllocator::kMinBlockSize));
  for (void* p : kept) a.deallocate(p);
}

TEST(StepPlan, AnEscapedBufferMayBeFreedOnAnotherThread) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  Step step{a};
  std::vector<void*> kept;
  const int64_t allocated = a.stats().allocated_bytes;
  {
    StepPlan plan = plan_step(a, [&] { kept.push_back(step()); });
    Step leaky{a};
    leaky.keep_temp = true;
    kept.push_back(plan.run(leaky));
    // Another thread frees the escaped buffer while this one runs steps from a fresh arena.
    std::thread other([&] { a.deallocate(leaky.escaped); });
    for (int i = 0; i < 20; ++i) kept.push_back(plan.run(step));
    other.join();
    EXPECT_EQ(a.stats().num_plan_misses, 1);
  }
  for (void* p : kept) a.deallocate(p);
  EXPECT_EQ(a.stats().allocated_bytes, allocated) << "both arenas went back";
}

TEST(StepPlan, AThrowingStepLeavesNoPlanAndNoRecording) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  const int64_t allocated = a.stats().allocated_bytes;
  EXPECT_THROW(plan_step(a,
                         [&] {
                           void* p = a.allocate(1000);
                           a.deallocate(p);
                           void* q = a.allocate(2000);
                           (void)q;
                           a.deallocate(q);
                           throw std::runtime_error("step failed");
                         }),
               std::runtime_error);
  EXPECT_EQ(a.stats().allocated_bytes, allocated);
  EXPECT_EQ(a.stats().num_plan_hits, 0);
  // Nothing is left recording: a new plan can be made and runs.
  Step step{a};
  std::vector<void*> kept;
  StepPlan plan = plan_step(a, [&] { kept.push_back(step()); });
  kept.push_back(plan.run(step));
  EXPECT_EQ(a.stats().num_plan_hits, 3);
  EXPECT_EQ(a.stats().num_plan_misses, 0);
  for (void* p : kept) a.deallocate(p);
}

TEST(StepPlan, APlanOverTheLimitIsRefusedNamingBothSizes) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu(), CachingAllocatorOptions().limit_bytes(1 << 20));
  void* kept = nullptr;
  // 600 KiB in-step, then 600 KiB kept: the recorded step reuses the bytes, but an arena for the
  // first beside the second needs 1.2 MiB.
  try {
    plan_step(a, [&] {
      void* x = a.allocate(600 * KiB);
      a.deallocate(x);
      kept = a.allocate(600 * KiB);
    });
    ADD_FAILURE() << "the plan was not refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("1229312 bytes"), std::string::npos) << what;  // arena block + the kept buffer
    EXPECT_NE(what.find("1048576 bytes"), std::string::npos) << what;  // the limit
    EXPECT_NE(what.find("MIXTRAIN_MEMORY_LIMIT_MB"), std::string::npos) << what;
  }
  ASSERT_NE(kept, nullptr);
  a.deallocate(kept);
  EXPECT_EQ(a.stats().allocated_bytes, 0);
  // No recording was left behind.
  void* p = a.allocate(100);
  a.deallocate(p);
  EXPECT_EQ(a.stats().num_plan_hits, 0);
}

TEST(StepPlan, OneSessionPerThread) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  auto step = [&] { a.deallocate(a.allocate(1000)); };
  StepPlan plan = plan_step(a, step);
  EXPECT_THROW(plan.run([&] { plan.run(step); }), Error);
  EXPECT_THROW(plan.run([&] { plan_step(a, step); }), Error);
  EXPECT_THROW(plan_step(a, [&] { plan_step(a, step); }), Error);
  plan.run(step);  // nothing was left installed
  EXPECT_GE(a.stats().num_plan_hits, 1);
}

TEST(StepPlan, DestroyingThePlanFreesTheArena) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  {
    StepPlan plan = plan_step(a, [&] { a.deallocate(a.allocate(10000)); });
    EXPECT_GT(a.stats().allocated_bytes, 10000);
  }
  EXPECT_EQ(a.stats().allocated_bytes, 0);
}

TEST(PlanCache, RecordsANewKeyAndDropsTheLeastRecentlyUsed) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  auto step = [&](size_t n) { return [&a, n] { a.deallocate(a.allocate(n)); }; };
  {
    PlanCache plans(a, 2);
    plans.run({1}, step(1000));
    plans.run({1}, step(1000));
    EXPECT_EQ(a.stats().num_plan_hits, 1);
    plans.run({2}, step(5000));
    plans.run({2}, step(5000));
    EXPECT_EQ(plans.size(), 2u);
    EXPECT_EQ(a.stats().num_plan_hits, 2);
    plans.run({1}, step(1000));  // key 1 is now the most recent
    plans.run({3}, step(9000));  // drops key 2
    EXPECT_EQ(plans.size(), 2u);
    EXPECT_EQ(plans.plan({2}), nullptr);
    ASSERT_NE(plans.plan({3}), nullptr);
    EXPECT_EQ(plans.plan({3})->arena_bytes(), 9216u);
    EXPECT_EQ(a.stats().allocated_bytes,
              static_cast<int64_t>(1024 + 9216 + 2 * CachingAllocator::kMinBlockSize))
        << "the arenas of keys 1 and 3, key 2's freed";
    EXPECT_EQ(a.stats().num_plan_misses, 0);
  }
  EXPECT_EQ(a.stats().allocated_bytes, 0);
  EXPECT_THROW(PlanCache(a, 0), Error);
}

}  // namespace
}  // namespace mixtrain::memory
