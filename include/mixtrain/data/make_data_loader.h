#pragma once
// make_data_loader: libtorch's torch::data::make_data_loader over mixtrain's DataLoader. The loader
// it returns owns the dataset (moved or copied in; a TensorDataset copy shares its tensors), so
// nothing has to outlive it:
//
//   auto loader = data::make_data_loader(data::TensorDataset(x, y), data::DataLoaderOptions().batch_size(64));
//   for (const data::Batch& batch : *loader) { ... batch.data, batch.target ... }
//
// As in libtorch the order comes from the Sampler template argument, RandomSampler by default
// (seeded with options.seed(), a new order each epoch); make_data_loader<SequentialSampler>(...)
// keeps the dataset's order. options.shuffle() is not consulted: the sampler decides.
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "mixtrain/data/dataloader.h"
#include "mixtrain/data/dataset.h"
#include "mixtrain/data/sampler.h"

namespace mixtrain::data {

namespace detail {
// Holds the dataset in a base that is built before the DataLoader base that refers to it.
template <class D>
struct DatasetHolder {
  explicit DatasetHolder(D d) : owned_dataset_(std::move(d)) {}
  D owned_dataset_;
};
}  // namespace detail

// A DataLoader that owns its dataset.
template <class D>
class OwningDataLoader : private detail::DatasetHolder<D>, public DataLoader {
 public:
  OwningDataLoader(D dataset, std::shared_ptr<const Sampler> sampler, const DataLoaderOptions& options)
      : detail::DatasetHolder<D>(std::move(dataset)), DataLoader(this->owned_dataset_, std::move(sampler), options) {}
  const D& dataset() const { return this->owned_dataset_; }
};

template <class SamplerType = RandomSampler, class D>
std::unique_ptr<OwningDataLoader<std::decay_t<D>>> make_data_loader(D&& dataset, const DataLoaderOptions& options = {}) {
  using Set = std::decay_t<D>;
  static_assert(std::is_base_of_v<Dataset, Set>, "make_data_loader: the dataset must derive from data::Dataset");
  static_assert(std::is_same_v<SamplerType, RandomSampler> || std::is_same_v<SamplerType, SequentialSampler>,
                "make_data_loader: the sampler is RandomSampler or SequentialSampler (or pass a sampler object)");
  const int64_t n = dataset.size();
  std::shared_ptr<const Sampler> sampler;
  if constexpr (std::is_same_v<SamplerType, RandomSampler>) sampler = std::make_shared<RandomSampler>(n, options.seed());
  else sampler = std::make_shared<SequentialSampler>(n);
  return std::make_unique<OwningDataLoader<Set>>(std::forward<D>(dataset), std::move(sampler), options);
}

// libtorch's make_data_loader(dataset, batch_size).
template <class SamplerType = RandomSampler, class D>
std::unique_ptr<OwningDataLoader<std::decay_t<D>>> make_data_loader(D&& dataset, int64_t batch_size) {
  return make_data_loader<SamplerType>(std::forward<D>(dataset), DataLoaderOptions().batch_size(batch_size));
}

// With a sampler of one's own (a distributed sampler, a RandomSampler with replacement).
template <class D>
std::unique_ptr<OwningDataLoader<std::decay_t<D>>> make_data_loader(D&& dataset, std::shared_ptr<const Sampler> sampler,
                                                                     const DataLoaderOptions& options = {}) {
  static_assert(std::is_base_of_v<Dataset, std::decay_t<D>>, "make_data_loader: the dataset must derive from data::Dataset");
  return std::make_unique<OwningDataLoader<std::decay_t<D>>>(std::forward<D>(dataset), std::move(sampler), options);
}

}  // namespace mixtrain::data
