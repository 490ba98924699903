#pragma once
// DistributedSampler: splits each global batch of a dataset among the ranks, evenly or by
// per-rank weights (--rank-weights 3,1) or explicit per-rank batch sizes. Every rank walks the
// same (optionally shuffled) order of the dataset, and rank r takes its slice of global batch k,
// so the ranks together draw exactly the samples one process would draw for that step.
#include <cstdint>
#include <string>
#include <vector>

namespace mixtrain::distributed {

// The one rule for per-rank weights, wherever they come from: one positive, finite number per
// rank. An Error otherwise, its message starting with `source` (what gave the weights).
void check_rank_weights(const std::vector<double>& weights, int world_size, const std::string& source);

class DistributedSampler {
 public:
  // rank_weights: empty or one positive weight per rank (even split when empty).
  DistributedSampler(int64_t dataset_size, int64_t global_batch, int rank, int world_size,
                     std::vector<double> rank_weights = {}, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  // Explicit per-rank batch sizes (their sum is the global batch).
  static DistributedSampler with_batch_sizes(int64_t dataset_size, const std::vector<int64_t>& rank_batches,
                                             int rank, bool shuffle = true, uint64_t seed = 0,
                                             bool drop_last = false);

  // Reshuffles for an epoch (the same on every rank for the same epoch).
  void set_epoch(int64_t epoch);
  // Global steps per epoch: the same on every rank.
  int64_t num_batches() const;
  // This rank's dataset indices for step k of the epoch (may be empty for a tiny last batch).
  std::vector<int64_t> batch(int64_t step) const;
  // Every rank's share of global batch k.
  std::vector<int64_t> batch_sizes(int64_t step) const;
  int64_t global_batch() const { return global_batch_; }

  // n split by weights: floors, then the remainders to the largest fractions (lower rank first).
  static std::vector<int64_t> split(int64_t n, const std::vector<double>& weights);

 private:
  int64_t size_, global_batch_;
  int rank_, world_;
  std::vector<double> weights_;
  std::vector<int64_t> fixed_;  // explicit per-rank sizes of a full batch, when given
  bool shuffle_, drop_last_;
  uint64_t seed_;
  std::vector<int64_t> order_;
};

}  // namespace mixtrain::distributed
