#pragma once
// RankBalancer: each rank's share of the global batch, following the ranks' measured speed. A
// synchronous data-parallel step lasts as long as its slowest rank, so a rank on a slower or
// busier device (another GPU model, a core the machine is sharing) holds everyone up. Fed every
// rank's rows and compute time of each step, the balancer moves the shares toward equal compute
// times. Every rank feeds it the same numbers (one all-reduce gives them), so every rank arrives
// at the same shares without a collective of its own. docs/DISTRIBUTED.md shows it in use.
#include <cstdint>
#include <vector>

#include "mixtrain/base/arg.h"

namespace mixtrain::distributed {

class RankBalancerOptions {
  // Each rank's speed is the median over its last `window` steps: one slow step (a page fault,
  // a preempted thread) moves nothing, a slow spell moves the shares after half a window.
  MT_ARG(int64_t, window) = 7;
  // A new split is taken only when it moves some rank's rows by at least this fraction of the
  // global batch (and at least one row), so noise does not reshuffle the shares every step.
  MT_ARG(double, min_change) = 0.04;
  // Steps observed before the first change (the allocator and caches warm up in the first ones);
  // the window must be full as well.
  MT_ARG(int64_t, warmup_steps) = 3;
  // No rank's share falls below this fraction of an even share.
  MT_ARG(double, min_share) = 0.25;
  // The dead band: the shares stay while the slowest rank's median time over the window is
  // within this fraction of the fastest's, or within what the steps' own scatter explains (2
  // standard errors of the two medians before the first change, 3 before the second, then 4).
  // The window holds steps at the current shares only.
  MT_ARG(double, tolerance) = 0.1;
  // After the first change (which corrects the initial shares all the way), each goes this
  // fraction of the way to the measured split (at least min_change of the batch, and all of it
  // when less than that would be left), so that noise in one window's timings moves the shares
  // only part of the way.
  MT_ARG(double, damping) = 0.5;
};

class RankBalancer {
 public:
  // initial_weights: one positive weight per rank, the shares to start from.
  explicit RankBalancer(std::vector<double> initial_weights, RankBalancerOptions options = RankBalancerOptions());

  // One step: every rank's rows and the seconds its share-dependent work took (forward and
  // backward, without the time spent waiting for other ranks). A step where some rank has no
  // rows or no time (the first step, before anything was measured) is not counted. Returns true
  // when weights() changed.
  bool observe(const std::vector<int64_t>& rows, const std::vector<double>& seconds);

  // The current shares (normalised to sum to 1 once the balancer has changed them).
  const std::vector<double>& weights() const { return weights_; }
  // Rows per second of each rank: the median over the window (empty before the first step).
  std::vector<double> speeds() const;
  int64_t changes() const { return changes_; }

 private:
  std::vector<double> weights_;
  // Whether the window's times show an imbalance beyond the dead band.
  bool imbalanced() const;
  std::vector<std::vector<double>> recent_;  // per step observed (the last `window`): each rank's rows/s
  std::vector<std::vector<double>> seconds_;  // the same steps' times
  RankBalancerOptions options_;
  int64_t observed_ = 0, changes_ = 0, since_change_ = 0;
};

}  // namespace mixtrain::distributed
