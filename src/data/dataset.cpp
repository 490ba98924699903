// TensorDataset and the default collate (stacking examples into a batch).
#include "mixtrain/data/dataset.h"

#include "mixtrain/base/error.h"
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

namespace {
// stack(parts, 0) into a pinned tensor: one copy per example, none after collating.
Tensor stack_pinned(const std::vector<Tensor>& parts) {
  const Tensor& first = parts.front();
  Shape shape = first.shape();
  shape.insert(shape.begin(), static_cast<int64_t>(parts.size()));
  Tensor out = Tensor::empty(shape, TensorOptions().dtype(first.dtype()).pinned_memory(true));
  for (size_t i = 0; i < parts.size(); ++i) out.select(0, static_cast<int64_t>(i)).copy_(parts[i]);
  return out;
}

Tensor stack_parts(const std::vector<Tensor>& parts, bool pinned) {
  // Examples already on a device stay there: only host memory is pinned.
  if (pinned && parts.front().device().is_cpu()) return stack_pinned(parts);
  return stack(parts, 0);
}

Batch collate(const std::vector<Example>& examples, bool pinned) {
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
  if (!data.empty()) b.data = stack_parts(data, pinned);
  if (!target.empty()) b.target = stack_parts(target, pinned);
  return b;
}
}  // namespace

Batch stack_examples(const std::vector<Example>& examples) { return collate(examples, false); }
Batch stack_examples_pinned(const std::vector<Example>& examples) { return collate(examples, true); }

}  // namespace mixtrain::data
