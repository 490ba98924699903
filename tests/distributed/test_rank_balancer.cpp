// RankBalancer: shares that follow each rank's measured speed (simulated ranks with known costs),
// robust to one slow step, never below a floor, refusing bad input; and DDP's per-step wait time
// that it is fed, in real processes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <thread>

#include "mixtrain/mixtrain.h"
#include "ranks.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;
using mt_dist_test::run_ranks;

namespace {

// A rank whose step costs `fixed` seconds plus `per_row` seconds per row of its share.
struct SimRank {
  double fixed, per_row;
};

// Runs `steps` steps of simulated ranks through a balancer; returns each step's seconds per rank.
std::vector<std::vector<double>> simulate(dist::RankBalancer& balancer, const std::vector<SimRank>& ranks,
                                          int64_t global, int steps) {
  std::vector<std::vector<double>> history;
  for (int s = 0; s < steps; ++s) {
    const std::vector<int64_t> rows = dist::DistributedSampler::split(global, balancer.weights());
    std::vector<double> seconds;
    for (size_t r = 0; r < ranks.size(); ++r)
      seconds.push_back(ranks[r].fixed + ranks[r].per_row * static_cast<double>(rows[r]));
    history.push_back(seconds);
    balancer.observe(rows, seconds);
  }
  return history;
}

double spread(const std::vector<double>& seconds) {
  const auto [lo, hi] = std::minmax_element(seconds.begin(), seconds.end());
  return *hi / *lo;
}

}  // namespace

TEST(RankBalancer, SharesFollowSpeedUntilComputeTimesAreEqual) {
  // Rank 1 takes twice rank 0's time per row, rank 2 three times, all with the same fixed cost.
  // Evenly split, the step waits 3x the fastest rank; balanced, equal up to the hysteresis (a
  // share is left alone unless some rank would move by 4 % of the batch: 48 rows here, 22 % of
  // the slowest rank's time).
  const std::vector<SimRank> ranks = {{2e-3, 1e-4}, {2e-3, 2e-4}, {2e-3, 3e-4}};
  dist::RankBalancer balancer({1, 1, 1});
  const auto history = simulate(balancer, ranks, 1200, 60);
  EXPECT_GT(spread(history.front()), 2.0);
  EXPECT_LT(spread(history.back()), 1.3);
  const std::vector<int64_t> rows = dist::DistributedSampler::split(1200, balancer.weights());
  EXPECT_GT(rows[0], rows[1]);
  EXPECT_GT(rows[1], rows[2]);
  EXPECT_NEAR(std::accumulate(balancer.weights().begin(), balancer.weights().end(), 0.0), 1.0, 1e-12);
  // The speeds it holds are the ranks' rows per second at their last shares.
  const std::vector<double> speeds = balancer.speeds();
  ASSERT_EQ(speeds.size(), 3u);
  EXPECT_GT(speeds[0], speeds[2]);
  // Settled: the last steps changed nothing.
  const int64_t changes = balancer.changes();
  EXPECT_GT(changes, 0);
  simulate(balancer, ranks, 1200, 20);
  EXPECT_EQ(balancer.changes(), changes);
}

TEST(RankBalancer, FollowsARankThatSlowsDownAndRecovers) {
  dist::RankBalancer balancer({1, 1});
  simulate(balancer, {{1e-3, 1e-4}, {1e-3, 1e-4}}, 1000, 20);
  EXPECT_EQ(balancer.changes(), 0);                            // equal ranks: the even split stays
  simulate(balancer, {{1e-3, 1e-4}, {2e-3, 2e-4}}, 1000, 20);  // rank 1 at half speed
  EXPECT_GT(balancer.weights()[0], 0.6);
  const auto back = simulate(balancer, {{1e-3, 1e-4}, {1e-3, 1e-4}}, 1000, 30);
  EXPECT_NEAR(balancer.weights()[0], 0.5, 0.05);
  EXPECT_LT(spread(back.back()), 1.2);
}

TEST(RankBalancer, OneSlowStepMovesNothing) {
  dist::RankBalancer balancer({1, 1});
  const std::vector<int64_t> rows = {256, 256};
  for (int s = 0; s < 40; ++s) {
    // Rank 1 takes 4x as long in one step in ten (a page fault, a preempted thread).
    const double t1 = s % 10 == 9 ? 0.04 : 0.01;
    EXPECT_FALSE(balancer.observe(rows, {0.01, t1})) << "step " << s;
  }
  EXPECT_EQ(balancer.weights(), (std::vector<double>{1, 1}));
}

TEST(RankBalancer, NoRankFallsBelowItsFloorOrLosesItsLastRow) {
  // Two ranks 1000x slower than the third: each held at a quarter of an even share (the default
  // floor), the fast one takes the rest.
  dist::RankBalancer balancer({1, 1, 1});
  simulate(balancer, {{0, 1e-6}, {0, 1e-3}, {0, 1e-3}}, 3000, 30);
  const auto& w = balancer.weights();
  EXPECT_NEAR(w[1], 0.25 / 3, 1e-9);
  EXPECT_NEAR(w[2], 0.25 / 3, 1e-9);
  EXPECT_NEAR(w[0], 1 - 0.5 / 3, 1e-9);
  // A batch with one row per rank cannot move.
  dist::RankBalancer tiny({1, 1}, dist::RankBalancerOptions().warmup_steps(0).window(1));
  EXPECT_FALSE(tiny.observe({1, 1}, {1e-3, 1.0}));
  EXPECT_EQ(tiny.weights(), (std::vector<double>{1, 1}));
  // With room to move, the same observation moves the slow rank to its floor.
  EXPECT_TRUE(tiny.observe({100, 100}, {1e-3, 1.0}));
  EXPECT_EQ(dist::DistributedSampler::split(100, tiny.weights()), (std::vector<int64_t>{88, 12}));
}

TEST(RankBalancer, StepsWithoutATimeAreNotCounted) {
  dist::RankBalancer balancer({1, 1}, dist::RankBalancerOptions().warmup_steps(2).window(1).min_change(0));
  EXPECT_FALSE(balancer.observe({500, 500}, {0.0, 0.0}));  // the first step: nothing measured yet
  EXPECT_TRUE(balancer.speeds().empty());
  EXPECT_FALSE(balancer.observe({500, 500}, {0.01, 0.02}));  // warm-up
  EXPECT_FALSE(balancer.observe({500, 500}, {0.01, 0.02}));  // warm-up
  EXPECT_TRUE(balancer.observe({500, 500}, {0.01, 0.02}));
  EXPECT_NEAR(balancer.weights()[0], 2.0 / 3, 1e-12);
}

// Ranks whose steps' times scatter (each step's time times e^N(0, 0.3), as on a shared machine),
// over 300 steps: equal ranks whose step is mostly a fixed cost, where the measured speeds follow
// only the noise, and two ranks 1.5x apart. The shares settle after a few changes, near the
// split that equalises the mean times.
TEST(RankBalancer, NoisyTimingsSettleAfterAFewChanges) {
  struct Case {
    std::vector<SimRank> ranks;
    std::vector<int64_t> low, high;  // the bounds of each rank's rows over the run
  };
  const std::vector<Case> cases = {
      {{{10e-3, 2e-5}, {10e-3, 2e-5}}, {96, 96}, {160, 160}},
      {{{10e-3, 2e-5}, {10e-3, 2e-5}, {10e-3, 2e-5}}, {50, 50, 50}, {120, 120, 120}},
      {{{2e-3, 1e-4}, {2e-3, 1.5e-4}}, {128, 80}, {176, 128}},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE("case " + std::to_string(c) + ", seed " + std::to_string(seed));
      const auto& ranks = cases[c].ranks;
      dist::RankBalancer balancer(std::vector<double>(ranks.size(), 1.0));
      std::mt19937 gen(seed);
      std::normal_distribution<double> noise(0.0, 0.3);
      std::vector<int64_t> low(ranks.size(), 256), high(ranks.size(), 0);
      for (int s = 0; s < 300; ++s) {
        const std::vector<int64_t> rows = dist::DistributedSampler::split(256, balancer.weights());
        std::vector<double> seconds;
        for (size_t r = 0; r < ranks.size(); ++r) {
          seconds.push_back((ranks[r].fixed + ranks[r].per_row * static_cast<double>(rows[r])) * std::exp(noise(gen)));
          low[r] = std::min(low[r], rows[r]);
          high[r] = std::max(high[r], rows[r]);
        }
        balancer.observe(rows, seconds);
      }
      EXPECT_LE(balancer.changes(), 4);
      for (size_t r = 0; r < ranks.size(); ++r) {
        EXPECT_GE(low[r], cases[c].low[r]) << "rank " << r;
        EXPECT_LE(high[r], cases[c].high[r]) << "rank " << r;
      }
    }
  }
}

TEST(RankBalancer, BadInputIsAnError) {
  auto refused = [](auto&& make, const std::string& words) {
    try {
      make();
    } catch (const mt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "accepted; expected an Error saying " << words;
  };
  refused([] { dist::RankBalancer({}); }, "no rank weights");
  refused([] { dist::RankBalancer({1, -1}); }, "RankBalancer: rank weights: -1 is not a positive number");
  refused([] { dist::RankBalancer({1, NAN}); }, "is not a positive number");
  // The same rule as the sampler's and the trainers' (one check in sampler.h).
  refused([] { dist::check_rank_weights({1, 1}, 3, "--rank-weights \"1,1\""); },
          "--rank-weights \"1,1\" give 2 values for 3 ranks");
  refused([] { dist::DistributedSampler(10, 4, 0, 2, {1, 0}); }, "DistributedSampler: rank weights: 0 is not");
  refused([] { dist::RankBalancer({1, 1}, dist::RankBalancerOptions().window(0)); }, "window");
  refused([] { dist::RankBalancer({1, 1}, dist::RankBalancerOptions().min_change(1)); }, "min_change");
  refused([] { dist::RankBalancer({1, 1}, dist::RankBalancerOptions().min_share(0)); }, "min_share");
  refused([] { dist::RankBalancer({1, 1}, dist::RankBalancerOptions().warmup_steps(-1)); }, "warmup_steps");
  refused([] { dist::RankBalancer({1, 1}, dist::RankBalancerOptions().tolerance(-0.1)); }, "tolerance");
  refused([] { dist::RankBalancer({1, 1}, dist::RankBalancerOptions().damping(0)); }, "damping");
  dist::RankBalancer balancer({1, 1});
  refused([&] { balancer.observe({1, 2, 3}, {1, 1}); }, "3 row counts and 2 times for 2 ranks");
}

// Rank 1 sleeps before its backward in step 1, rank 0 in step 2: the other rank's
// step_wait_seconds counts the sleep, and each step starts counting afresh.
MT_SCENARIO(ddp_step_wait) {
  dist::init_process_group();
  const int r = dist::rank();
  mt::manual_seed(1);
  auto model = mt::nn::Sequential(mt::nn::Linear(4, 8), mt::nn::ReLU(), mt::nn::Linear(8, 1));
  mt::nn::DistributedDataParallel ddp(model);
  const mt::Tensor x = mt::randn({6, 4}), y = mt::randn({6, 1});
  std::vector<double> waits;
  for (int step = 1; step <= 2; ++step) {
    const mt::Tensor loss = mt::nn::functional::mse_loss(ddp.forward(x), y);
    if (r == 2 - step) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    loss.backward();
    waits.push_back(ddp.step_wait_seconds());
  }
  std::fprintf(stderr, "rank %d waited %.3f s and %.3f s\n", r, waits[0], waits[1]);
  const double sleeper_wait = waits[r == 1 ? 0 : 1], other_wait = waits[r == 1 ? 1 : 0];
  SC_CHECK(other_wait >= 0.3);
  SC_CHECK(sleeper_wait < other_wait);
  return 0;
}

TEST(DDP, StepWaitSecondsCountsTheTimeSpentOnSlowerRanks) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("ddp_step_wait", 2, std::chrono::seconds(40));
  for (const auto& rr : res) EXPECT_EQ(rr.exit_code, 0) << mt_dist_test::describe(res);
}
