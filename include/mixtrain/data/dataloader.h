#pragma once
// DataLoader: batches of a dataset in a sampler's order, prepared by background worker threads.
//
//   data::DataLoader loader(dataset, data::DataLoaderOptions().batch_size(64).shuffle(true).seed(1)
//                                        .num_workers(2).device(Device::cuda()));
//   for (const data::Batch& b : loader) { ... }             // one epoch
//   data::Batch b = loader.next_batch();                     // or by steps, across epochs
//
// Order. Batch k of the stream is always the same batch, whatever num_workers is: workers take
// batch numbers in turn and the consumer receives them by number. Prefetch is bounded: at most
// num_workers * prefetch_factor batches are ready or in progress ahead of the consumer.
// Errors. An exception thrown while a worker gets or collates a batch is rethrown by the call
// that would have returned that batch; the stream then goes on with the next batch.
// Resuming. state_dict() is the position of the consumer (not of the workers, which run ahead):
// save it in a checkpoint (io::save_checkpoint's `parts`) and load_state_dict() continues with
// the batch that followed.
// Devices. Batches are collated on the host by the workers; with device() set, the consumer's
// thread copies each batch there with Tensor::to. With pin_memory(true) the workers collate into
// pinned (page-locked) host tensors and the copy to a CUDA device is non_blocking: it is queued on
// the device's stream, ahead of the step's kernels, and next() returns at once. As in PyTorch,
// pin_memory(true) where pinned memory cannot be had (no CUDA backend or no device) prints one
// warning at construction and delivers ordinary, unpinned batches; pins_memory() says which.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mixtrain/base/arg.h"
#include "mixtrain/base/device.h"
#include "mixtrain/data/dataset.h"
#include "mixtrain/data/sampler.h"

namespace mixtrain::data {

using CollateFn = std::function<Batch(const std::vector<Example>&)>;

class DataLoaderOptions {
 public:
  MT_ARG(int64_t, batch_size) = 1;
  MT_ARG(bool, shuffle) = false;         // RandomSampler(seed) instead of SequentialSampler
  MT_ARG(uint64_t, seed) = 0;
  MT_ARG(bool, drop_last) = false;       // drop each epoch's last, smaller batch
  MT_ARG(int64_t, num_workers) = 0;      // 0: batches are made in the consumer's thread
  MT_ARG(int64_t, prefetch_factor) = 2;  // batches ahead per worker
  MT_ARG(std::optional<Device>, device); // where batches are delivered (unset: where collated)
  MT_ARG(CollateFn, collate);            // unset: stack_examples
  MT_ARG(bool, pin_memory) = false;      // collate into pinned host memory (see Devices above)
};

class DataLoader {
 public:
  // The dataset must outlive the loader. A custom sampler replaces shuffle/seed.
  DataLoader(const Dataset& dataset, const DataLoaderOptions& options = {});
  DataLoader(const Dataset& dataset, std::shared_ptr<const Sampler> sampler, const DataLoaderOptions& options = {});
  // Stops and joins the workers. Virtual: make_data_loader returns loaders that own their dataset.
  virtual ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch of the current epoch and true; false (and `out` untouched) at the end of the
  // epoch, after which the next call returns the next epoch's first batch.
  bool next(Batch& out);
  // The next batch, moving on to the next epoch as needed: for loops counted in steps.
  Batch next_batch();
  // Skips n batches (across epochs) without making them.
  void skip(int64_t n);

  int64_t batches_per_epoch() const { return batches_.batches_per_epoch(); }
  // Epoch of the next batch, and batches of it already delivered.
  SamplerPosition position() const { return consumed_; }
  const DataLoaderOptions& options() const { return options_; }
  // Whether batches are collated into pinned memory: pin_memory(true) and pinned memory available.
  bool pins_memory() const { return pin_; }

  nlohmann::json state_dict() const;  // BatchSampler::state_dict at the consumer's position
  void validate_state_dict(const nlohmann::json& state) const;
  void load_state_dict(const nlohmann::json& state);

  // Iterates the rest of the current epoch: for (const Batch& b : loader).
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = const Batch*;
    using reference = const Batch&;
    Iterator() = default;
    explicit Iterator(DataLoader* loader);
    const Batch& operator*() const { return batch_; }
    const Batch* operator->() const { return &batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return loader_ == other.loader_; }
    bool operator!=(const Iterator& other) const { return loader_ != other.loader_; }

   private:
    DataLoader* loader_ = nullptr;
    Batch batch_;
  };
  Iterator begin() { return Iterator(this); }
  Iterator end() { return Iterator(); }

 private:
  struct Item {  // one entry of the stream: a batch, the end of an epoch, or an error
    bool end_of_epoch = false;
    Batch batch;
    std::exception_ptr error;
  };
  Item make_item(bool end_of_epoch, const std::vector<int64_t>& indices) const;
  Item take();  // the next item of the stream, in order
  void start_workers();
  void join_workers();  // never throws: what the destructor calls
  void stop_workers();  // joins, drops what was made ahead, rewinds the producers
  void worker_loop();

  const Dataset& dataset_;
  DataLoaderOptions options_;
  bool pin_ = false;
  int64_t capacity_ = 0;       // batches ready or in progress ahead of the consumer, at most
  BatchSampler batches_;       // the producers' position
  SamplerPosition consumed_;   // the consumer's position

  // Worker state, guarded by mutex_.
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_cv_, ready_cv_;
  bool stopping_ = false;
  uint64_t scheduled_ = 0, delivered_ = 0;  // stream numbers handed to workers / to the consumer
  std::map<uint64_t, Item> ready_;
};

}  // namespace mixtrain::data
