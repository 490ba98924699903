#pragma once
// DistributedSampler: splits each global batch of a dataset among the ranks, evenly, by per-rank
// weights (--rank-weights 3,1), by explicit per-rank batch sizes, or as the process group's shares
// say (the launcher's, rank_shares.h). Every rank walks the same (optionally shuffled) order of
// the dataset, and rank r takes its slice of global batch k, so the ranks together draw exactly
// the samples one process would draw for that step.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mixtrain/base/arg.h"
#include "mixtrain/base/device.h"
#include "mixtrain/distributed/rank_shares.h"

namespace mixtrain::distributed {

// Builds one training step for a share of `rows` samples on meta tensors (its model, optimizer
// and inputs made with Device::meta(), e.g. under nn::init::SkipInitGuard) and returns the step,
// which memory::dry_run_step runs twice to predict its peak.
using DryRunStepBuilder = std::function<std::function<void()>(int64_t rows)>;

class DistributedSamplerOptions {
  MT_ARG(bool, shuffle) = true;
  MT_ARG(uint64_t, seed) = 0;
  MT_ARG(bool, drop_last) = false;
  // Needed under MIXTRAIN_RANK_BATCHES=auto (mixtrain launch --rank-batches auto) only: the step
  // each rank dry-runs to find the largest share of the global batch its memory holds.
  MT_ARG(DryRunStepBuilder, dry_run_step);
  // The device that step trains on, whose memory the share must fit (CUDA: the rank's own GPU).
  MT_ARG(Device, device) = Device::cpu();
};

class DistributedSampler {
 public:
  // The default process group's rank, size and shares (init_process_group first), which it took
  // from the launcher: even, --rank-weights, adaptive (DistributedDataParallel moves them; each
  // batch is split as they stand when it is drawn, so draw a step's batch after the previous
  // step's backward), or --rank-batches auto (resolved here, by options.dry_run_step and
  // fit_rank_shares, before the first batch: make the sampler before the model takes its memory).
  DistributedSampler(int64_t dataset_size, int64_t global_batch,
                     const DistributedSamplerOptions& options = DistributedSamplerOptions());
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
  // The shares batch_sizes splits by now (one per rank).
  std::vector<double> rank_weights() const;

  // n split by weights: floors, then the remainders to the largest fractions (lower rank first).
  static std::vector<int64_t> split(int64_t n, const std::vector<double>& weights);

 private:
  int64_t size_, global_batch_;
  int rank_, world_;
  std::vector<double> weights_;
  bool follow_group_ = false;  // weights are the default group's shares, read at every batch
  std::vector<int64_t> fixed_;  // explicit per-rank sizes of a full batch, when given
  bool shuffle_, drop_last_;
  uint64_t seed_;
  std::vector<int64_t> order_;
};

}  // namespace mixtrain::distributed
