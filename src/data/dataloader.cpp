// DataLoader: worker threads make numbered batches, the consumer takes them in number order.
#include "mixtrain/data/dataloader.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <iostream>
#include <limits>
#include <system_error>

#include <nlohmann/json.hpp>

#include "mixtrain/base/checked_int.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/memory/allocator.h"

namespace mixtrain::data {

namespace {
// Far more threads than any machine has cores; past it a typo (1000000) is an Error, not a
// std::system_error from the thread library halfway through starting them.
constexpr int64_t kMaxNumWorkers = 1024;

std::shared_ptr<const Sampler> default_sampler(const Dataset& dataset, const DataLoaderOptions& o) {
  if (o.shuffle()) return std::make_shared<RandomSampler>(dataset.size(), o.seed());
  return std::make_shared<SequentialSampler>(dataset.size());
}

}  // namespace

DataLoader::DataLoader(const Dataset& dataset, const DataLoaderOptions& options)
    : DataLoader(dataset, default_sampler(dataset, options), options) {}

DataLoader::DataLoader(const Dataset& dataset, std::shared_ptr<const Sampler> sampler, const DataLoaderOptions& options)
    : dataset_(dataset), options_(options), batches_(std::move(sampler), options.batch_size(), options.drop_last()) {
  MT_CHECK(options.num_workers() >= 0 && options.num_workers() <= kMaxNumWorkers, "DataLoader: num_workers must be in [0, ",
           kMaxNumWorkers, "], got ", options.num_workers());
  MT_CHECK(options.prefetch_factor() > 0, "DataLoader: prefetch_factor must be positive, got ",
           options.prefetch_factor());
  capacity_ = checked_mul(options.num_workers(), options.prefetch_factor(),
                          "DataLoader: num_workers * prefetch_factor (batches in flight)");
  if (options.pin_memory()) {
    const std::string why = memory::pinned_memory_unavailable_reason();
    pin_ = why.empty();
    // PyTorch's behaviour: the same script still runs on a machine without a GPU.
    if (!pin_) std::cerr << "mixtrain warning: DataLoader: pin_memory(true) ignored, batches are not pinned: " << why << "\n";
  }
}

DataLoader::~DataLoader() { join_workers(); }

DataLoader::Item DataLoader::make_item(bool end_of_epoch, const std::vector<int64_t>& indices) const {
  Item item;
  item.end_of_epoch = end_of_epoch;
  if (end_of_epoch) return item;
  try {
    NoGradGuard no_grad;  // batches are data, never part of a graph
    std::vector<Example> examples;
    examples.reserve(indices.size());
    for (int64_t i : indices) examples.push_back(dataset_.get(i));
    if (options_.collate()) {
      item.batch = options_.collate()(examples);
      // Pinned in the worker, off the consumer's thread (a no-op for what the collate pinned itself).
      if (pin_ && item.batch.data.defined() && item.batch.data.device().is_cpu())
        item.batch.data = item.batch.data.pin_memory();
      if (pin_ && item.batch.target.defined() && item.batch.target.device().is_cpu())
        item.batch.target = item.batch.target.pin_memory();
    } else {
      item.batch = pin_ ? stack_examples_pinned(examples) : stack_examples(examples);
    }
  } catch (...) {
    item.error = std::current_exception();
  }
  return item;
}

void DataLoader::start_workers() {
  stopping_ = false;
  for (int64_t i = 0; i < options_.num_workers(); ++i) {
    try {
      workers_.emplace_back([this] { worker_loop(); });
    } catch (const std::system_error& e) {
      stop_workers();
      MT_ERROR("DataLoader: could not start worker thread ", i + 1, " of num_workers ", options_.num_workers(), ": ",
               e.what());
    }
  }
}

void DataLoader::join_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void DataLoader::stop_workers() {
  join_workers();
  // Whatever the workers made ahead is dropped; the producers restart at the consumer's position
  // (always a valid one: nothing assigns consumed_ before checking it).
  ready_.clear();
  scheduled_ = delivered_ = 0;
  batches_.set_position(consumed_);
}

void DataLoader::worker_loop() {
#ifdef _OPENMP
  // One thread per worker: the workers are the parallelism. A worker's CPU ops would otherwise
  // start an OpenMP team of their own next to the training thread's and oversubscribe the cores.
  omp_set_num_threads(1);
#endif
  const auto capacity = static_cast<uint64_t>(capacity_);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || scheduled_ - delivered_ < capacity; });
    if (stopping_) return;
    const uint64_t number = scheduled_++;
    std::vector<int64_t> indices;
    bool end_of_epoch = false;
    try {
      end_of_epoch = !batches_.next(indices);
    } catch (...) {  // a custom sampler that throws: reported to the consumer like a bad batch
      Item item;
      item.error = std::current_exception();
      ready_.emplace(number, std::move(item));
      ready_cv_.notify_all();
      continue;
    }
    lock.unlock();
    Item item = make_item(end_of_epoch, indices);
    lock.lock();
    ready_.emplace(number, std::move(item));
    ready_cv_.notify_all();
  }
}

DataLoader::Item DataLoader::take() {
  // The item at the consumer's position is its epoch's end once all its batches are delivered;
  // there is no epoch after 2^63 - 1 to move to.
  MT_CHECK(consumed_.batch < batches_per_epoch() || consumed_.epoch < std::numeric_limits<int64_t>::max(),
           "DataLoader: epoch ", consumed_.epoch, " is the last one an int64 counts (2^63 - 1); the stream cannot ",
           "pass its end");
  Item item;
  if (options_.num_workers() == 0) {
    std::vector<int64_t> indices;
    const bool end = !batches_.next(indices);
    item = make_item(end, indices);
  } else {
    if (workers_.empty()) start_workers();
    std::unique_lock<std::mutex> lock(mutex_);
    ready_cv_.wait(lock, [&] { return ready_.count(delivered_) > 0; });
    auto it = ready_.find(delivered_);
    item = std::move(it->second);
    ready_.erase(it);
    ++delivered_;
    lock.unlock();
    work_cv_.notify_one();
  }
  // The consumer's position moves past the item whether it holds a batch or an error.
  if (item.end_of_epoch)
    consumed_ = {consumed_.epoch + 1, 0};
  else
    ++consumed_.batch;
  return item;
}

bool DataLoader::next(Batch& out) {
  Item item = take();
  if (item.error) std::rethrow_exception(item.error);
  if (item.end_of_epoch) return false;
  if (options_.device()) {
    NoGradGuard no_grad;
    const Device dev = *options_.device();
    // Queued on the device's stream when pinned; the step's kernels follow it on that stream.
    if (item.batch.data.defined()) item.batch.data = item.batch.data.to(dev, /*non_blocking=*/pin_);
    if (item.batch.target.defined()) item.batch.target = item.batch.target.to(dev, /*non_blocking=*/pin_);
  }
  out = std::move(item.batch);
  return true;
}

Batch DataLoader::next_batch() {
  Batch b;
  if (!next(b)) next(b);  // an epoch boundary: the second call is the new epoch's first batch
  return b;
}

void DataLoader::skip(int64_t n) {
  MT_CHECK(n >= 0, "DataLoader::skip: n must be >= 0, got ", n);
  const int64_t per_epoch = batches_per_epoch();
  SamplerPosition p = consumed_;
  // Like n calls of next_batch(): an epoch's end is passed only on the way to a later batch, so
  // a position that leaves its epoch lands on batch 1..per_epoch of a later one.
  const int64_t left = per_epoch - p.batch;
  if (n <= left) {
    p.batch += n;
  } else {
    const int64_t beyond = n - left;  // batches taken from later epochs, at least 1
    const int64_t epochs = (beyond - 1) / per_epoch + 1;
    p.epoch = checked_add(p.epoch, epochs, "DataLoader::skip: the epoch after skipping");
    p.batch = beyond - (epochs - 1) * per_epoch;
  }
  stop_workers();
  consumed_ = p;
  batches_.set_position(p);
}

nlohmann::json DataLoader::state_dict() const {
  nlohmann::json j = batches_.state_dict();
  j["epoch"] = consumed_.epoch;
  j["batch"] = consumed_.batch;
  return j;
}

void DataLoader::validate_state_dict(const nlohmann::json& state) const { batches_.validate_state_dict(state); }

void DataLoader::load_state_dict(const nlohmann::json& state) {
  validate_state_dict(state);
  stop_workers();
  consumed_ = {state["epoch"].get<int64_t>(), state["batch"].get<int64_t>()};
  batches_.set_position(consumed_);
}

DataLoader::Iterator::Iterator(DataLoader* loader) : loader_(loader) { ++*this; }

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (loader_ && !loader_->next(batch_)) loader_ = nullptr;
  return *this;
}

}  // namespace mixtrain::data
