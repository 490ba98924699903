// TensorDataset and the default collate (stacking examples into a batch).
#include "mixtrain/data/dataset.h"

#include "mixtrain/core/error.h"
#include "mixtrain/ops/functional.h"

namespace mixtrain::data {

namespace {
std::string describe(const Tensor& t) { return t.defined() ? t.summary() : std::string("undefined"); }
}  // namespace

void check_index(const char* what, int64_t index, int64_t size) {
  MT_CHECK(index >= 0 && index < size, what, ": index ", index, " is out of range for ", size, " examples");
}

TensorDataset::TensorDataset(Tensor data, Tensor target) : data_(std::move(data)), target_(std::move(target)) {
  MT_CHECK(data_.defined() && data_.dim() >= 1, "TensorDataset: data must have a first (example) dimension, got ",
           describe(data_));
  size_ = data_.size(0);
  MT_CHECK(!target_.defined() || (target_.dim() >= 1 && target_.size(0) == size_), "TensorDataset: target ",
           describe(target_), " does not have the data's ", size_, " rows (data ", describe(data_), ")");
}

Example TensorDataset::get(int64_t index) const {
  check_index("TensorDataset::get", index, size_);
  return {data_.select(0, index), target_.defined() ? target_.select(0, index) : Tensor()};
}

Batch stack_examples(const std::vector<Example>& examples) {
  MT_CHECK(!examples.empty(), "stack_examples: no examples to collate");
  const Example& first = examples.front();
  std::vector<Tensor> data, target;
  data.reserve(examples.size());
  target.reserve(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    const Example& e = examples[i];
    MT_CHECK(e.data.defined() == first.data.defined() && e.target.defined() == first.target.defined(),
             "stack_examples: example ", i, " has data ", describe(e.data), " and target ", describe(e.target),
             " but example 0 has data ", describe(first.data), " and target ", describe(first.target));
    auto same = [](const Tensor& a, const Tensor& b) {
      return !a.defined() || (a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device());
    };
    MT_CHECK(same(e.data, first.data) && same(e.target, first.target), "stack_examples: example ", i, " has data ",
             describe(e.data), " and target ", describe(e.target), " but example 0 has data ", describe(first.data),
             " and target ", describe(first.target), " (write a collate function for examples of varying shape)");
    if (e.data.defined()) data.push_back(e.data);
    if (e.target.defined()) target.push_back(e.target);
  }
  Batch b;
  if (!data.empty()) b.data = stack(data, 0);
  if (!target.empty()) b.target = stack(target, 0);
  return b;
}

}  // namespace mixtrain::data
