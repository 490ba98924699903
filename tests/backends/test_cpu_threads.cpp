// The CPU backend's thread count (affinity, OMP_NUM_THREADS) and the governor that runs parallel
// regions on one thread while they lose to other processes. tests/CMakeLists.txt also runs the
// CpuThreads tests under `taskset -c 0`, with and without OMP_NUM_THREADS, expecting the count
// given in MT_EXPECT_CPU_THREADS.
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "backends/cpu/loops.h"
#include "backends/cpu/threads.h"
#include "mixtrain/base/error.h"
#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mixtrain::backends::cpu {
namespace {

constexpr int64_t kMs = 1'000'000;
using G = ThreadGovernor;

TEST(CpuThreads, AffinityCapsTheDefault) {
  EXPECT_EQ(choose_threads(2, 1, false), 1);
  EXPECT_EQ(choose_threads(8, 3, false), 3);
  EXPECT_EQ(choose_threads(2, 16, false), 2);
  EXPECT_EQ(choose_threads(4, 0, false), 4);  // affinity unknown
}

TEST(CpuThreads, UserThreadCountWins) {
  EXPECT_EQ(choose_threads(3, 1, true), 3);
  EXPECT_EQ(choose_threads(1, 8, true), 1);
}

TEST(CpuThreads, AdaptiveSwitchParses) {
  EXPECT_TRUE(parse_adaptive(nullptr));
  EXPECT_TRUE(parse_adaptive("1"));
  EXPECT_FALSE(parse_adaptive("0"));
  for (const char* bad : {"", "2", "yes", "0x1", "1 "}) {
    try {
      parse_adaptive(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("MIXTRAIN_CPU_ADAPTIVE"), std::string::npos) << e.what();
    }
  }
}

// The process's count: MT_EXPECT_CPU_THREADS when the test runner gives one (taskset runs), else
// within the affinity mask unless the user chose a count.
TEST(CpuThreads, ProcessCountFollowsEnvironment) {
  const ThreadGovernor& g = governor();
  const char* user = std::getenv("OMP_NUM_THREADS");
  if (const char* expect = std::getenv("MT_EXPECT_CPU_THREADS")) {
    EXPECT_EQ(g.full(), std::atoi(expect));
  } else if (user == nullptr) {
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
    EXPECT_GE(g.full(), 1);
    EXPECT_LE(g.full(), CPU_COUNT(&set));
  }
  // A count the user chose, or a single CPU, leaves nothing to adapt.
  if (user != nullptr || g.full() == 1) {
    EXPECT_FALSE(g.adaptive());
  }
}

std::set<std::thread::id> threads_of_parallel_for(int64_t n) {
  std::vector<int> hits(static_cast<size_t>(n), 0);
  std::set<std::thread::id> ids;
  std::mutex m;
  parallel_for(n, kParallelGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
    std::lock_guard<std::mutex> lock(m);
    ids.insert(std::this_thread::get_id());
  });
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)], 1) << "element " << i;
  return ids;
}

// A parallel loop covers each element once on at most the chosen threads.
TEST(CpuThreads, ParallelForUsesTheChosenThreads) {
  const std::set<std::thread::id> ids = threads_of_parallel_for(1 << 20);
  EXPECT_GE(ids.size(), 1u);
  EXPECT_LE(static_cast<int>(ids.size()), governor().full());
  if (const char* expect = std::getenv("MT_EXPECT_CPU_THREADS"); expect && std::atoi(expect) == 1) {
    EXPECT_EQ(ids.size(), 1u);
  }
}

TEST(CpuThreads, NestedRegionsRunOnTheirThread) {
  int inner = -1;
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) inner = split_threads();
  }
  EXPECT_EQ(inner, 1);
}

// What a training step computes with threads: a deep GEMM (cut into blocks fixed by its shape,
// gemm_blocks.h) and a convolution's weight gradient (summed per run of samples).
std::vector<Tensor> threaded_results() {
  const Tensor a = mixtrain::testing::random_tensor({300, 2000}, kFloat32, 1);
  const Tensor b = mixtrain::testing::random_tensor({2000, 300}, kFloat32, 2);
  Tensor x = mixtrain::testing::random_tensor({6, 3, 20, 20}, kFloat32, 3);
  Tensor w = mixtrain::testing::random_tensor({8, 3, 3, 3}, kFloat32, 4);
  w.set_requires_grad(true);
  nn::functional::conv2d(x, w).sum().backward();
  return {matmul(a, b), w.grad()};
}

// Under load the governor runs the regions on one thread; the results keep every bit.
TEST(CpuThreads, SerialSpellGivesBitIdenticalResults) {
  ThreadGovernor& g = governor();
  if (!g.adaptive())
    GTEST_SKIP() << "the thread count is fixed at " << g.full()
                 << " here (OMP_NUM_THREADS set, MIXTRAIN_CPU_ADAPTIVE=0 or a single CPU): there is no serial spell";
  const std::vector<Tensor> parallel = threaded_results();
  g.hold_serial(now_ns() + 3600 * int64_t{1'000'000'000});
  const std::vector<Tensor> serial = threaded_results();
  EXPECT_EQ(threads_of_parallel_for(1 << 20).size(), 1u);
  g.hold_serial(0);
  ASSERT_TRUE(regions_parallel(now_ns()));
  for (size_t i = 0; i < parallel.size(); ++i) {
    ASSERT_EQ(parallel[i].numel(), serial[i].numel());
    EXPECT_EQ(std::memcmp(parallel[i].contiguous().raw_data(), serial[i].contiguous().raw_data(),
                          static_cast<size_t>(parallel[i].numel()) * sizeof(float)),
              0)
        << "result " << i;
  }
}

TEST(CpuThreadGovernor, GoodWindowsKeepAllThreads) {
  G g(2, true);
  int64_t t = 1000 * kMs;
  for (int i = 0; i < 10; ++i, t += 10 * kMs) g.record(t, 2, 8 * kMs, 3 * kMs);
  EXPECT_FALSE(g.serial(t));
  EXPECT_EQ(g.serial_switches(), 0);
}

TEST(CpuThreadGovernor, LosingWindowGoesSerialForACooldown) {
  G g(2, true);
  const int64_t t = 1000 * kMs;
  g.record(t, 2, 4 * kMs, 3 * kMs);  // 7 ms: the window is still open
  EXPECT_FALSE(g.serial(t));
  EXPECT_EQ(g.serial_switches(), 0);
  g.record(t, 2, 0, 3 * kMs);  // 4 ms busy, 6 ms waiting: slower than one thread
  EXPECT_EQ(g.serial_switches(), 1);
  EXPECT_TRUE(g.serial(t + 1));
  EXPECT_TRUE(g.serial(t + G::kFirstCooldownNs - 1));
  EXPECT_FALSE(g.serial(t + G::kFirstCooldownNs));
  EXPECT_EQ(g.cooldown_ns(), 2 * G::kFirstCooldownNs);
}

TEST(CpuThreadGovernor, FailedProbesBackOffAndAGoodOneResets) {
  G g(2, true);
  int64_t t = 1000 * kMs;
  int64_t expected = G::kFirstCooldownNs;
  for (int i = 0; i < 12; ++i) {
    g.record(t, 2, 1 * kMs, 20 * kMs);
    ASSERT_TRUE(g.serial(t + expected - 1)) << "probe " << i;
    ASSERT_FALSE(g.serial(t + expected)) << "probe " << i;
    t += expected;
    expected = std::min(2 * expected, G::kMaxCooldownNs);
  }
  EXPECT_EQ(g.cooldown_ns(), G::kMaxCooldownNs);
  g.record(t, 2, 9 * kMs, 2 * kMs);
  EXPECT_FALSE(g.serial(t));
  EXPECT_EQ(g.cooldown_ns(), G::kFirstCooldownNs);
}

TEST(CpuThreadGovernor, ThresholdScalesWithTheThreads) {
  // With 4 threads, waiting 2.5x the caller's share still beats running the 4 shares serially.
  G g(4, true);
  g.record(1000 * kMs, 4, 4 * kMs, 10 * kMs);
  EXPECT_EQ(g.serial_switches(), 0);
  g.record(1000 * kMs, 4, 1 * kMs, 10 * kMs);
  EXPECT_EQ(g.serial_switches(), 1);
}

TEST(CpuThreadGovernor, FixedCountsNeverAdapt) {
  G fixed(2, false);
  fixed.record(1000 * kMs, 2, 1 * kMs, 50 * kMs);
  EXPECT_FALSE(fixed.serial(1000 * kMs + 1));
  G single(1, true);
  EXPECT_FALSE(single.adaptive());
  single.hold_serial(2000 * kMs);
  EXPECT_FALSE(single.serial(1000 * kMs));  // one thread already: nothing to fall back from
}

}  // namespace
}  // namespace mixtrain::backends::cpu
