// Sequential and random samplers, and the batch sampler whose position a checkpoint saves.
#include "mixtrain/data/sampler.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/json_fields.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/rng.h"

namespace mixtrain::data {

SequentialSampler::SequentialSampler(int64_t size) : size_(size) {
  MT_CHECK(size > 0, "SequentialSampler: size must be positive, got ", size);
}

std::vector<int64_t> SequentialSampler::epoch_order(int64_t) const {
  std::vector<int64_t> order(static_cast<size_t>(size_));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

nlohmann::json SequentialSampler::settings() const { return {{"type", "SequentialSampler"}, {"size", size_}}; }

RandomSampler::RandomSampler(int64_t dataset_size, uint64_t seed, bool replacement, int64_t num_samples)
    : dataset_size_(dataset_size), seed_(seed), replacement_(replacement),
      num_samples_(num_samples < 0 ? dataset_size : num_samples) {
  MT_CHECK(dataset_size > 0, "RandomSampler: dataset size must be positive, got ", dataset_size);
  MT_CHECK(num_samples_ > 0 && (replacement || num_samples_ == dataset_size), "RandomSampler: num_samples ",
           num_samples, " must be positive, and equal to the dataset size ", dataset_size, " without replacement");
}

std::vector<int64_t> RandomSampler::epoch_order(int64_t epoch) const {
  MT_CHECK(epoch >= 0, "RandomSampler: epoch must be >= 0, got ", epoch);
  const auto n = static_cast<uint64_t>(dataset_size_);
  Generator gen(seed_);
  std::vector<int64_t> order(static_cast<size_t>(num_samples_));
  if (replacement_) {
    gen.set_state({seed_, static_cast<uint64_t>(epoch) * static_cast<uint64_t>(num_samples_)});
    for (auto& i : order) i = static_cast<int64_t>(gen.next_u64() % n);
    return order;
  }
  std::iota(order.begin(), order.end(), 0);
  // Each epoch's shuffle takes n - 1 draws; epoch e continues where epoch e - 1 stopped.
  gen.set_state({seed_, static_cast<uint64_t>(epoch) * (n - 1)});
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[gen.next_u64() % i]);
  return order;
}

nlohmann::json RandomSampler::settings() const {
  return {{"type", "RandomSampler"},
          {"size", dataset_size_},
          {"seed", seed_},
          {"replacement", replacement_},
          {"num_samples", num_samples_}};
}

BatchSampler::BatchSampler(std::shared_ptr<const Sampler> sampler, int64_t batch_size, bool drop_last)
    : sampler_(std::move(sampler)), batch_size_(batch_size), drop_last_(drop_last) {
  MT_CHECK(sampler_ != nullptr, "BatchSampler: no sampler");
  MT_CHECK(batch_size > 0, "BatchSampler: batch size must be positive, got ", batch_size);
  MT_CHECK(batches_per_epoch() > 0, "BatchSampler: batch size ", batch_size, " exceeds the sampler's ",
           sampler_->size(), " indices with drop_last, so an epoch has no batch");
}

int64_t BatchSampler::batches_per_epoch() const {
  const int64_t n = sampler_->size();
  // Not (n + batch_size - 1) / batch_size, which wraps for a batch size near 2^63.
  return n / batch_size_ + (!drop_last_ && n % batch_size_ != 0 ? 1 : 0);
}

const std::vector<int64_t>& BatchSampler::order_of(int64_t epoch) const {
  if (cached_epoch_ != epoch) {
    cached_order_ = sampler_->epoch_order(epoch);
    MT_CHECK(static_cast<int64_t>(cached_order_.size()) == sampler_->size(), "BatchSampler: the sampler gave ",
             cached_order_.size(), " indices for an epoch of ", sampler_->size());
    cached_epoch_ = epoch;
  }
  return cached_order_;
}

std::vector<int64_t> BatchSampler::batch_indices(int64_t epoch, int64_t batch) const {
  MT_CHECK(batch >= 0 && batch < batches_per_epoch(), "BatchSampler: batch ", batch, " is outside an epoch of ",
           batches_per_epoch(), " batches");
  const std::vector<int64_t>& order = order_of(epoch);
  const int64_t begin = batch * batch_size_;
  const int64_t end = std::min<int64_t>(begin + batch_size_, static_cast<int64_t>(order.size()));
  return std::vector<int64_t>(order.begin() + begin, order.begin() + end);
}

bool BatchSampler::next(std::vector<int64_t>& indices) {
  if (pos_.batch >= batches_per_epoch()) {
    MT_CHECK(pos_.epoch < std::numeric_limits<int64_t>::max(), "BatchSampler: epoch ", pos_.epoch,
             " is the last one an int64 counts (2^63 - 1); the stream cannot pass its end");
    pos_ = {pos_.epoch + 1, 0};
    return false;
  }
  indices = batch_indices(pos_.epoch, pos_.batch);
  ++pos_.batch;
  return true;
}

void BatchSampler::set_position(const SamplerPosition& pos) {
  MT_CHECK(pos.epoch >= 0 && pos.batch >= 0 && pos.batch <= batches_per_epoch(), "BatchSampler: position (epoch ",
           pos.epoch, ", batch ", pos.batch, ") is outside an epoch of ", batches_per_epoch(), " batches");
  pos_ = pos;
}

nlohmann::json BatchSampler::state_dict() const {
  return {{"sampler", sampler_->settings()},
          {"batch_size", batch_size_},
          {"drop_last", drop_last_},
          {"epoch", pos_.epoch},
          {"batch", pos_.batch}};
}

void BatchSampler::validate_state_dict(const nlohmann::json& state) const {
  const std::string where = "sampler state_dict";
  json_io::check_object_keys(state, {"sampler", "batch_size", "drop_last", "epoch", "batch"}, {}, where);
  MT_CHECK(state["sampler"] == sampler_->settings(), where, ".sampler is ", state["sampler"].dump(),
           " but this loader's sampler is ", sampler_->settings().dump(), " (a different order)");
  const int64_t bs = json_io::json_integer(state, "batch_size", where, 1, std::numeric_limits<int64_t>::max());
  MT_CHECK(bs == batch_size_, where, ".batch_size is ", bs, " but this loader's is ", batch_size_);
  const bool dl = json_io::json_bool(state, "drop_last", where);
  MT_CHECK(dl == drop_last_, where, ".drop_last is ", dl ? "true" : "false", " but this loader's is ",
           drop_last_ ? "true" : "false");
  json_io::json_integer(state, "epoch", where, 0, std::numeric_limits<int64_t>::max());
  json_io::json_integer(state, "batch", where, 0, batches_per_epoch());
}

void BatchSampler::load_state_dict(const nlohmann::json& state) {
  validate_state_dict(state);
  pos_ = {state["epoch"].get<int64_t>(), state["batch"].get<int64_t>()};
}

}  // namespace mixtrain::data
