#pragma once
// Samplers: the order in which a DataLoader visits a dataset. An epoch's order is a pure function
// of the sampler's settings and the epoch number, so a position (epoch, batch) is all a checkpoint
// needs to resume the data stream exactly.
#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mixtrain::data {

// Yields the dataset indices of one epoch.
class Sampler {
 public:
  virtual ~Sampler() = default;
  // Indices per epoch.
  virtual int64_t size() const = 0;
  // The index order of `epoch` (0-based).
  virtual std::vector<int64_t> epoch_order(int64_t epoch) const = 0;
  // {"type": ..., and the settings that decide the order}; a checkpoint's copy must match.
  virtual nlohmann::json settings() const = 0;
};

// 0, 1, ..., n - 1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t size);
  int64_t size() const override { return size_; }
  std::vector<int64_t> epoch_order(int64_t epoch) const override;
  nlohmann::json settings() const override;

 private:
  int64_t size_;
};

// A new random order every epoch, drawn from one mixtrain::Generator seeded with `seed` and
// continued from epoch to epoch, so the order is the same on every platform and any epoch is
// computed without replaying the others. Without replacement: a Fisher-Yates shuffle of the n
// indices (epoch e starts at draw e * (n - 1)). With replacement (PyTorch's replacement=True):
// num_samples independent draws in [0, n) per epoch (epoch e starts at draw e * num_samples).
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t dataset_size, uint64_t seed, bool replacement = false, int64_t num_samples = -1);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> epoch_order(int64_t epoch) const override;
  nlohmann::json settings() const override;
  uint64_t seed() const { return seed_; }

 private:
  int64_t dataset_size_;
  uint64_t seed_;
  bool replacement_;
  int64_t num_samples_;
};

// Where a batch stream stands: `batch` batches of `epoch` have been handed out.
struct SamplerPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
};

// Groups a sampler's indices into batches of batch_size (the last one smaller unless
// drop_last), epoch after epoch, and remembers its position.
class BatchSampler {
 public:
  BatchSampler(std::shared_ptr<const Sampler> sampler, int64_t batch_size, bool drop_last = false);

  int64_t batch_size() const { return batch_size_; }
  bool drop_last() const { return drop_last_; }
  int64_t batches_per_epoch() const;
  const Sampler& sampler() const { return *sampler_; }

  // The next batch's indices and true, or false at the end of an epoch (the position then moves
  // to the start of the next epoch, so the following call returns its first batch).
  bool next(std::vector<int64_t>& indices);
  // The indices of batch `batch` of `epoch`.
  std::vector<int64_t> batch_indices(int64_t epoch, int64_t batch) const;

  SamplerPosition position() const { return pos_; }
  void set_position(const SamplerPosition& pos);

  // {"sampler": sampler settings, "batch_size", "drop_last", "epoch", "batch"}.
  nlohmann::json state_dict() const;
  // Throws mixtrain::Error naming the field when `state` is not this sampler's (other settings,
  // a position outside the epoch, a missing or unknown key); changes nothing.
  void validate_state_dict(const nlohmann::json& state) const;
  void load_state_dict(const nlohmann::json& state);

 private:
  const std::vector<int64_t>& order_of(int64_t epoch) const;

  std::shared_ptr<const Sampler> sampler_;
  int64_t batch_size_;
  bool drop_last_;
  SamplerPosition pos_;
  mutable int64_t cached_epoch_ = -1;  // epoch_order is O(n): computed once per epoch
  mutable std::vector<int64_t> cached_order_;
};

}  // namespace mixtrain::data
