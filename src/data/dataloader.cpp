// DataLoader: worker threads make numbered batches, the consumer takes them in number order.
#include "mixtrain/data/dataloader.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <iostream>

#include <nlohmann/json.hpp>

#include "mixtrain/autograd/grad_mode.h"
#include "mixtrain/core/error.h"
#include "mixtrain/memory/allocator.h"

namespace mixtrain::data {

namespace {
std::shared_ptr<const Sampler> default_sampler(const Dataset& dataset, const DataLoaderOptions& o) {
  if (o.shuffle()) return std::make_shared<RandomSampler>(dataset.size(), o.seed());
  return std::make_shared<SequentialSampler>(dataset.size());
}

}  // namespace

DataLoader::DataLoader(const Dataset& dataset, const DataLoaderOptions& options)
    : DataLoader(dataset, default_sampler(dataset, options), options) {}

DataLoader::DataLoader(const Dataset& dataset, std::shared_ptr<const Sampler> sampler, const DataLoaderOptions& options)
    : dataset_(dataset), options_(options), batches_(std::move(sampler), options.batch_size(), options.drop_last()) {
  MT_CHECK(options.num_workers() >= 0, "DataLoader: num_workers must be >= 0, got ", options.num_workers());
  MT_CHECK(options.prefetch_factor() > 0, "DataLoader: prefetch_factor must be positive, got ",
           options.prefetch_factor());
  if (options.pin_memory()) {
    const std::string why = memory::pinned_memory_unavailable_reason();
    pin_ = why.empty();
    // PyTorch's behaviour: the same script still runs on a machine without a GPU.
    if (!pin_) std::cerr << "mixtrain warning: DataLoader: pin_memory(true) ignored, batches are not pinned: " << why << "\n";
  }
}

DataLoader::~DataLoader() { stop_workers(); }

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
  for (int64_t i = 0; i < options_.num_workers(); ++i) workers_.emplace_back([this] { worker_loop(); });
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  // Whatever the workers made ahead is dropped; the producers restart at the consumer's position.
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
  const uint64_t capacity = static_cast<uint64_t>(options_.num_workers() * options_.prefetch_factor());
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
  // Like n calls of next_batch(): an epoch's end is passed only on the way to a later batch.
  p.batch += n;
  while (p.batch > per_epoch) {
    p.batch -= per_epoch;
    ++p.epoch;
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
