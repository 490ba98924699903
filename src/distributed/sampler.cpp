// DistributedSampler: one global order per epoch, each global batch split among ranks.
#include "mixtrain/distributed/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "mixtrain/base/error.h"
#include "mixtrain/distributed/process_group.h"
#include "mixtrain/memory/batch_fit.h"
#include "mixtrain/memory/dry_run.h"

namespace mixtrain::distributed {

namespace {
uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t global_batch, int rank, int world_size,
                                       std::vector<double> rank_weights, bool shuffle, uint64_t seed, bool drop_last)
    : size_(dataset_size),
      global_batch_(global_batch),
      rank_(rank),
      world_(world_size),
      weights_(std::move(rank_weights)),
      shuffle_(shuffle),
      drop_last_(drop_last),
      seed_(seed) {
  MT_CHECK(dataset_size >= 0 && global_batch > 0, "DistributedSampler: dataset size ", dataset_size,
           " and global batch ", global_batch, " must be non-negative and positive");
  MT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "DistributedSampler: rank ", rank,
           " is not in a group of ", world_size);
  if (weights_.empty()) weights_.assign(static_cast<size_t>(world_size), 1.0);
  check_rank_weights(weights_, world_size, "DistributedSampler: rank weights");
  MT_CHECK(global_batch >= world_size, "DistributedSampler: a global batch of ", global_batch,
           " cannot give each of ", world_size, " ranks a sample");
  set_epoch(0);
}

namespace {

// MIXTRAIN_RANK_BATCHES=auto for the sampler's own step: each probe builds the step at that many
// rows and dry-runs it twice.
void fit_shares_by_dry_run(const DistributedSamplerOptions& options, int64_t global_batch) {
  MT_CHECK(static_cast<bool>(options.dry_run_step()), "DistributedSampler: MIXTRAIN_RANK_BATCHES=auto (mixtrain ",
           "launch --rank-batches auto) sizes each rank's share by a dry run of the training step; give ",
           "DistributedSamplerOptions().dry_run_step(...), or fixed shares with --rank-weights");
  const Device target = options.device();
  fit_rank_shares(target, global_batch, [&](int64_t budget) {
    const auto peak_at = [&](int64_t rows) {
      return memory::dry_run_step(target, options.dry_run_step()(rows)).peak_bytes();
    };
    const memory::BatchFit fit = memory::fit_batch(peak_at, budget, 2, global_batch);
    return fit.fits ? fit.batch : int64_t{0};
  });
}

}  // namespace

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t global_batch,
                                       const DistributedSamplerOptions& options)
    : size_(dataset_size),
      global_batch_(global_batch),
      follow_group_(true),
      shuffle_(options.shuffle()),
      drop_last_(options.drop_last()),
      seed_(options.seed()) {
  MT_CHECK(is_initialized(), "DistributedSampler: no process group to take the rank, world size and shares from; ",
           "call distributed::init_process_group() first, or give them to the other constructor");
  MT_CHECK(dataset_size >= 0 && global_batch > 0, "DistributedSampler: dataset size ", dataset_size,
           " and global batch ", global_batch, " must be non-negative and positive");
  ProcessGroup& group = default_group();
  rank_ = group.rank();
  world_ = group.world_size();
  MT_CHECK(global_batch >= world_, "DistributedSampler: a global batch of ", global_batch, " cannot give each of ",
           world_, " ranks a sample");
  if (group.rank_shares().by_memory) fit_shares_by_dry_run(options, global_batch);
  set_epoch(0);
}

std::vector<double> DistributedSampler::rank_weights() const {
  return follow_group_ ? default_group().rank_shares().weights_for(world_) : weights_;
}

DistributedSampler DistributedSampler::with_batch_sizes(int64_t dataset_size, const std::vector<int64_t>& sizes,
                                                        int rank, bool shuffle, uint64_t seed, bool drop_last) {
  MT_CHECK(!sizes.empty(), "DistributedSampler: no per-rank batch sizes");
  std::vector<double> w;
  for (int64_t b : sizes) {
    MT_CHECK(b > 0, "DistributedSampler: per-rank batch sizes must be positive, got ", b);
    w.push_back(static_cast<double>(b));
  }
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  DistributedSampler s(dataset_size, total, rank, static_cast<int>(sizes.size()), w, shuffle, seed, drop_last);
  s.fixed_ = sizes;
  return s;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  order_.resize(static_cast<size_t>(size_));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (!shuffle_) return;
  uint64_t state = seed_ * 0x2545f4914f6cdd1dull + static_cast<uint64_t>(epoch);
  for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[splitmix64(state) % i]);
}

int64_t DistributedSampler::num_batches() const {
  return drop_last_ ? size_ / global_batch_ : (size_ + global_batch_ - 1) / global_batch_;
}

std::vector<int64_t> DistributedSampler::split(int64_t n, const std::vector<double>& weights) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> out(weights.size());
  std::vector<std::pair<double, size_t>> frac;
  int64_t given = 0;
  for (size_t r = 0; r < weights.size(); ++r) {
    const double exact = static_cast<double>(n) * weights[r] / total;
    out[r] = static_cast<int64_t>(std::floor(exact));
    given += out[r];
    frac.emplace_back(exact - static_cast<double>(out[r]), r);
  }
  std::stable_sort(frac.begin(), frac.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < n; ++k, ++given) ++out[frac[k % frac.size()].second];
  return out;
}

std::vector<int64_t> DistributedSampler::batch_sizes(int64_t step) const {
  MT_CHECK(step >= 0 && step < num_batches(), "DistributedSampler: step ", step, " is outside the epoch's ",
           num_batches(), " batches");
  const int64_t n = std::min(global_batch_, size_ - step * global_batch_);
  if (!fixed_.empty() && n == global_batch_) return fixed_;
  return split(n, rank_weights());
}

std::vector<int64_t> DistributedSampler::batch(int64_t step) const {
  const std::vector<int64_t> sizes = batch_sizes(step);
  int64_t begin = step * global_batch_;
  for (int r = 0; r < rank_; ++r) begin += sizes[static_cast<size_t>(r)];
  const auto first = order_.begin() + begin;
  return std::vector<int64_t>(first, first + sizes[static_cast<size_t>(rank_)]);
}

}  // namespace mixtrain::distributed
