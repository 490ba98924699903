// The CPU backend's worker threads (backends/cpu/thread_pool.h): every part of a region runs once,
// on the caller and the workers; nested regions, regions asked by two threads at once and
// exceptions; a forked child runs regions on threads of its own.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backends/cpu/thread_pool.h"
#include "backends/cpu/threads.h"

namespace mixtrain::backends::cpu {
namespace {

// Runs a region of `parts` parts on `threads` threads; returns how often each part ran.
std::vector<int> run_counting(int parts, int threads, RegionTimes* times = nullptr) {
  std::vector<std::atomic<int>> runs(static_cast<size_t>(parts));
  struct Ctx {
    std::vector<std::atomic<int>>* runs;
    int parts;
    bool sizes_agree = true;
  } ctx{&runs, parts};
  const RegionTimes t = run_region(parts, threads, [](void* c, int part, int n) {
    auto& x = *static_cast<Ctx*>(c);
    if (n != x.parts) x.sizes_agree = false;
    (*x.runs)[static_cast<size_t>(part)].fetch_add(1);
  }, &ctx);
  if (times) *times = t;
  EXPECT_TRUE(ctx.sizes_agree);
  std::vector<int> out;
  for (auto& r : runs) out.push_back(r.load());
  return out;
}

TEST(CpuThreadPool, EveryPartRunsOnceWhateverTheTeam) {
  for (int threads : {1, 2, 3, 8}) {
    for (int parts : {1, 2, 3, 7, 64}) {
      RegionTimes t;
      const std::vector<int> runs = run_counting(parts, threads, &t);
      for (int p = 0; p < parts; ++p) EXPECT_EQ(runs[static_cast<size_t>(p)], 1) << "part " << p << " of " << parts;
      EXPECT_EQ(t.team, std::min(parts, threads)) << parts << " parts on " << threads << " threads";
      EXPECT_GE(t.busy_ns, 0);
      EXPECT_GE(t.wait_ns, 0);
    }
  }
}

TEST(CpuThreadPool, ManyRegionsBackToBackLoseNoPart) {
  // Thousands of short regions, as a training step makes: a lost wake-up would hang here (ctest's
  // timeout) and a part run twice or not at all would change the sum.
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 20000; ++r) {
    run_parallel(2, [&](int part, int) { sum.fetch_add(part + 1); });
  }
  EXPECT_EQ(sum.load(), 20000 * 3);
}

TEST(CpuThreadPool, TheCallerIsPartOfTheTeamAndWorkersAreOtherThreads) {
  std::vector<std::thread::id> who(2);
  run_region(2, 2, [](void* c, int part, int) {
    (*static_cast<std::vector<std::thread::id>*>(c))[static_cast<size_t>(part)] = std::this_thread::get_id();
  }, &who);
  EXPECT_EQ(who[0], std::this_thread::get_id());
  EXPECT_NE(who[1], std::this_thread::get_id());
}

TEST(CpuThreadPool, NestedRegionsRunOnTheirOwnThread) {
  std::vector<int> inner_split(4, -1);
  std::vector<std::thread::id> outer(4), inner(4);
  run_parallel(4, [&](int part, int) {
    EXPECT_TRUE(in_region());
    inner_split[static_cast<size_t>(part)] = split_threads();
    outer[static_cast<size_t>(part)] = std::this_thread::get_id();
    run_parallel(3, [&](int, int) { inner[static_cast<size_t>(part)] = std::this_thread::get_id(); });
  });
  EXPECT_FALSE(in_region());
  for (size_t p = 0; p < 4; ++p) {
    EXPECT_EQ(inner_split[p], 1);
    EXPECT_EQ(inner[p], outer[p]) << "a nested region left its thread";
  }
}

TEST(CpuThreadPool, AnExceptionInAPartReachesTheCallerAfterEveryPart) {
  std::atomic<int> ran{0};
  EXPECT_THROW(run_parallel(8,
                            [&](int part, int) {
                              ran.fetch_add(1);
                              if (part == 5) throw std::runtime_error("part 5");
                            }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 8);
  EXPECT_FALSE(in_region());
  // The pool still works afterwards.
  const std::vector<int> runs = run_counting(4, 2);
  EXPECT_EQ(runs, std::vector<int>(4, 1));
}

TEST(CpuThreadPool, TwoCallersAtOnceBothFinishEveryPart) {
  // The workers serve one region at a time; the other caller runs its parts itself.
  std::atomic<int64_t> a{0}, b{0};
  auto caller = [](std::atomic<int64_t>& sum) {
    for (int r = 0; r < 3000; ++r) run_parallel(4, [&](int part, int) { sum.fetch_add(part); });
  };
  std::thread t1(caller, std::ref(a)), t2(caller, std::ref(b));
  t1.join();
  t2.join();
  EXPECT_EQ(a.load(), 3000 * 6);
  EXPECT_EQ(b.load(), 3000 * 6);
}

TEST(CpuThreadPool, AForkedChildRunsRegionsOnThreadsOfItsOwn) {
  run_counting(4, 2);  // the parent's workers exist before the fork
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<int> sum{0};
    for (int r = 0; r < 100; ++r) run_parallel(2, [&](int part, int) { sum.fetch_add(part + 1); });
    _exit(sum.load() == 300 ? 0 : 1);
  }
  int status = 0;
  // A child waiting for the parent's workers would hang: give it 20 s.
  for (int i = 0; i < 200 && waitpid(child, &status, WNOHANG) == 0; ++i) usleep(100'000);
  if (waitpid(child, &status, WNOHANG) == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "the forked child did not finish its regions within 20 s";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace mixtrain::backends::cpu
