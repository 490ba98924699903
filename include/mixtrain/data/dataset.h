#pragma once
// Datasets: random access to examples (PyTorch's map-style Dataset). A DataLoader (data/
// dataloader.h) draws indices from a sampler, gets the examples and collates them into batches.
#include <cstdint>
#include <string>
#include <vector>

#include "mixtrain/core/tensor.h"

namespace mixtrain::data {

// One example: an input and its target (either may be undefined when a dataset has none).
struct Example {
  Tensor data;
  Tensor target;
};

// A collated batch: the examples' data and targets stacked along a new first dimension.
using Batch = Example;

// Random access to `size()` examples. get() may be called from several DataLoader workers at
// once, so it must not change shared state (reading is fine).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Example `index`, 0 <= index < size(); out of range is a mixtrain::Error.
  virtual Example get(int64_t index) const = 0;
};

// Examples are rows (first-dimension slices) of a data tensor and a target tensor with the same
// number of rows (the target may be undefined). get() returns views, so collating copies once.
class TensorDataset : public Dataset {
 public:
  TensorDataset() = default;
  explicit TensorDataset(Tensor data, Tensor target = Tensor());
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  const Tensor& data() const { return data_; }
  const Tensor& target() const { return target_; }

 private:
  Tensor data_, target_;
  int64_t size_ = 0;
};

// Checks 0 <= index < size with an Error naming `what`.
void check_index(const char* what, int64_t index, int64_t size);

// Stacks the examples' data and targets (undefined targets stay undefined): the default collate.
// Every example must have the same shapes and dtypes (an Error names the first that differs).
Batch stack_examples(const std::vector<Example>& examples);
// The same, stacking host examples straight into pinned memory (DataLoader's pin_memory(true));
// throws as Tensor::pin_memory where pinned memory cannot be had.
Batch stack_examples_pinned(const std::vector<Example>& examples);

}  // namespace mixtrain::data
