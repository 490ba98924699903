// RankBalancer: shares in proportion to each rank's median rows per second. Its fixed point is
// the split where every rank's compute time is the same: weights w_r ~ rows_r / seconds_r stay
// put exactly when all seconds_r are equal, whatever the fixed cost of a step. Near it (a step's
// fixed cost dominating, or noisy timings) the measured speeds only follow the noise, so the
// shares move only on an imbalance that the window's scatter does not explain, and partly.
#include "mixtrain/distributed/rank_balancer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "mixtrain/base/error.h"
#include "mixtrain/distributed/sampler.h"

namespace mixtrain::distributed {

RankBalancer::RankBalancer(std::vector<double> initial_weights, RankBalancerOptions options)
    : weights_(std::move(initial_weights)), options_(options) {
  MT_CHECK(!weights_.empty(), "RankBalancer: no rank weights");
  check_rank_weights(weights_, static_cast<int>(weights_.size()), "RankBalancer: rank weights");
  MT_CHECK(options_.window() >= 1, "RankBalancer: window must be at least 1 step, got ", options_.window());
  MT_CHECK(options_.min_change() >= 0 && options_.min_change() < 1, "RankBalancer: min_change must be in [0, 1), got ",
           options_.min_change());
  MT_CHECK(options_.min_share() > 0 && options_.min_share() <= 1, "RankBalancer: min_share must be in (0, 1], got ",
           options_.min_share());
  MT_CHECK(options_.warmup_steps() >= 0, "RankBalancer: warmup_steps must be >= 0, got ", options_.warmup_steps());
  MT_CHECK(options_.tolerance() >= 0 && std::isfinite(options_.tolerance()),
           "RankBalancer: tolerance must be a finite number >= 0, got ", options_.tolerance());
  MT_CHECK(options_.damping() > 0 && options_.damping() <= 1, "RankBalancer: damping must be in (0, 1], got ",
           options_.damping());
}

namespace {

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

bool RankBalancer::imbalanced() const {
  // Per rank: the median log time and its standard error (from the median absolute deviation:
  // 1.4826 MAD estimates sigma, and a median's error is 1.25 sigma / sqrt(n)).
  const size_t world = weights_.size();
  std::vector<double> center(world), error(world);
  for (size_t r = 0; r < world; ++r) {
    std::vector<double> logs;
    for (const auto& step : seconds_) logs.push_back(std::log(step[r]));
    center[r] = median(logs);
    for (double& l : logs) l = std::abs(l - center[r]);
    error[r] = 1.25 * 1.4826 * median(logs) / std::sqrt(static_cast<double>(logs.size()));
  }
  const size_t slow = static_cast<size_t>(std::max_element(center.begin(), center.end()) - center.begin());
  const size_t fast = static_cast<size_t>(std::min_element(center.begin(), center.end()) - center.begin());
  // The evidence asked for grows with each change (2, 3, then 4 standard errors): the first moves
  // follow a clear imbalance quickly, and noise cannot keep re-splitting a settled batch.
  const double sigmas = static_cast<double>(std::min<int64_t>(2 + changes_, 4));
  const double noise = sigmas * std::sqrt(error[slow] * error[slow] + error[fast] * error[fast]);
  return center[slow] - center[fast] > std::log1p(options_.tolerance()) + noise;
}

std::vector<double> RankBalancer::speeds() const {
  if (recent_.empty()) return {};
  std::vector<double> out(weights_.size());
  for (size_t r = 0; r < out.size(); ++r) {
    std::vector<double> mine;
    for (const auto& step : recent_) mine.push_back(step[r]);
    std::nth_element(mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(mine.size() / 2), mine.end());
    out[r] = mine[mine.size() / 2];
  }
  return out;
}

bool RankBalancer::observe(const std::vector<int64_t>& rows, const std::vector<double>& seconds) {
  const size_t world = weights_.size();
  MT_CHECK(rows.size() == world && seconds.size() == world, "RankBalancer.observe: ", rows.size(), " row counts and ",
           seconds.size(), " times for ", world, " ranks");
  for (size_t r = 0; r < world; ++r)
    if (rows[r] <= 0 || !(seconds[r] > 0) || !std::isfinite(seconds[r])) return false;
  std::vector<double> speed(world);
  for (size_t r = 0; r < world; ++r) speed[r] = static_cast<double>(rows[r]) / seconds[r];
  recent_.push_back(std::move(speed));
  seconds_.push_back(seconds);
  if (static_cast<int64_t>(recent_.size()) > options_.window()) {
    recent_.erase(recent_.begin());
    seconds_.erase(seconds_.begin());
  }
  ++observed_;
  ++since_change_;
  if (observed_ <= options_.warmup_steps() || static_cast<int64_t>(recent_.size()) < options_.window()) return false;
  if (changes_ > 0 && since_change_ < options_.window()) return false;  // the window is not all at these shares
  if (!imbalanced()) return false;
  const std::vector<double> speed_of = speeds();

  // Shares in proportion to speed, none below its floor: ranks under it are held at it and the
  // rest share what is left in proportion to speed, until no share is under (at most one round
  // per rank).
  const double floor = options_.min_share() / static_cast<double>(world);
  std::vector<bool> held(world, false);
  std::vector<double> target(world);
  for (size_t round = 0; round <= world; ++round) {
    double free_speed = 0, free_share = 1;
    for (size_t r = 0; r < world; ++r) {
      if (held[r]) {
        free_share -= floor;
      } else {
        free_speed += speed_of[r];
      }
    }
    bool again = false;
    for (size_t r = 0; r < world; ++r) {
      target[r] = held[r] ? floor : free_share * speed_of[r] / free_speed;
      if (!held[r] && target[r] < floor) held[r] = again = true;
    }
    if (!again) break;
  }

  const int64_t global = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  const std::vector<int64_t> now = DistributedSampler::split(global, weights_);
  const std::vector<int64_t> next = DistributedSampler::split(global, target);
  int64_t moved = 0;
  for (size_t r = 0; r < world; ++r) {
    if (next[r] < 1) return false;  // a batch too small to give every rank a row at these shares
    moved = std::max(moved, std::abs(next[r] - now[r]));
  }
  const double threshold = std::max(1.0, options_.min_change() * static_cast<double>(global));
  if (static_cast<double>(moved) < threshold) return false;
  // The first change corrects the initial shares all the way; later ones go part of the way (at
  // least the threshold's worth), or all of it when what would be left is under the threshold
  // (it could never be moved alone).
  double part = changes_ == 0 ? 1.0 : std::max(options_.damping(), threshold / static_cast<double>(moved));
  if (static_cast<double>(moved) * (1 - part) < threshold) part = 1;
  const double total = std::accumulate(weights_.begin(), weights_.end(), 0.0);
  for (size_t r = 0; r < world; ++r) target[r] = weights_[r] / total + part * (target[r] - weights_[r] / total);
  weights_ = target;
  ++changes_;
  since_change_ = 0;
  return true;
}

}  // namespace mixtrain::distributed
