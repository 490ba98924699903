// The default generator shared by threads: every draw gets its own offset, so the values several
// threads draw are, as a multiset, those of one thread drawing the same count.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "mixtrain/base/rng.h"
#include "mixtrain/core/factories.h"

namespace mixtrain {
namespace {

constexpr int kThreads = 4;
constexpr int kDrawsPerThread = 50000;

template <class Draw>
std::vector<double> draw_concurrently(Draw draw) {
  std::vector<std::vector<double>> per_thread(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      per_thread[t].reserve(kDrawsPerThread);
      for (int i = 0; i < kDrawsPerThread; ++i) per_thread[t].push_back(draw());
    });
  for (auto& th : threads) th.join();
  std::vector<double> all;
  for (auto& v : per_thread) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  return all;
}

// What one thread drawing `count` values in one go gets.
std::vector<double> sequential_uniforms(uint64_t seed, int64_t count) {
  manual_seed(seed);
  std::vector<float> f = rand({count}).to_vector<float>();
  std::vector<double> v(f.begin(), f.end());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(RngThreads, RandOnTheDefaultGeneratorMatchesASequentialDraw) {
  manual_seed(1234);
  auto all = draw_concurrently([] { return static_cast<double>(rand({1}).item<float>()); });
  EXPECT_EQ(default_generator().state().offset, uint64_t{kThreads} * kDrawsPerThread) << "offsets were lost";
  EXPECT_EQ(all, sequential_uniforms(1234, int64_t{kThreads} * kDrawsPerThread));
}

TEST(RngThreads, NextU64OnASharedGeneratorTakesDistinctOffsets) {
  Generator gen(99);
  auto all = draw_concurrently([&] { return static_cast<double>(gen.next_u64() >> 11); });
  std::vector<double> expected;
  for (uint64_t n = 0; n < uint64_t{kThreads} * kDrawsPerThread; ++n) expected.push_back(static_cast<double>(random_draw(99, n) >> 11));
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);
  EXPECT_EQ(gen.state().offset, uint64_t{kThreads} * kDrawsPerThread);
}

TEST(RngThreads, ReservationsPairTheSeedWithItsOffsetWhileAnotherThreadReseeds) {
  // A thread reseeding while others reserve: each reservation is (seed, offset) of one state,
  // so a reservation under seed s starts at an offset reached under s (never past the draws taken).
  Generator gen(1);
  std::atomic<bool> stop{false};
  std::thread reseeder([&] {
    for (uint64_t s = 2; !stop.load(); ++s) gen.manual_seed(s % 2 == 0 ? 1 : 2);
  });
  std::vector<GeneratorState> got;
  for (int i = 0; i < 100000; ++i) got.push_back(gen.reserve_draws(1));
  stop = true;
  reseeder.join();
  for (const auto& s : got) {
    ASSERT_TRUE(s.seed == 1 || s.seed == 2);
    ASSERT_LT(s.offset, 100000u);
  }
}

TEST(RngThreads, RandintMatchesPerElementDraws) {
  // randint reserves once for the tensor; the values are those of next_u64 element by element.
  manual_seed(7);
  Tensor t = randint(0, 1000, {64});
  Generator ref(7);
  auto v = t.to_vector<int64_t>();
  for (int i = 0; i < 64; ++i) EXPECT_EQ(v[static_cast<size_t>(i)], static_cast<int64_t>(ref.next_u64() % 1000)) << "element " << i;
  EXPECT_EQ(default_generator().state().offset, 64u);
}

}  // namespace
}  // namespace mixtrain
