#include "common/dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mixtrain::examples {

void Dataset::check(const std::string& what) const {
  MT_CHECK(size > 0 && features > 0, what, ": empty dataset (", size, " rows, ", features, " features)");
  MT_CHECK(static_cast<int64_t>(x.size()) == size * features, what, ": ", x.size(), " feature values for ", size,
           " rows of ", features);
  MT_CHECK(labels.empty() != targets.empty(), what, ": a dataset has either labels or targets");
  const size_t n = labels.empty() ? targets.size() : labels.size();
  MT_CHECK(static_cast<int64_t>(n) == size, what, ": ", n, " labels/targets for ", size, " rows");
}

Dataset Dataset::subset(const std::vector<int64_t>& rows) const {
  Dataset out;
  out.size = static_cast<int64_t>(rows.size());
  out.features = features;
  out.feature_names = feature_names;
  out.x.reserve(rows.size() * static_cast<size_t>(features));
  for (int64_t r : rows) {
    MT_CHECK(r >= 0 && r < size, "Dataset::subset: row ", r, " out of range for ", size, " rows");
    out.x.insert(out.x.end(), x.begin() + r * features, x.begin() + (r + 1) * features);
    if (!labels.empty()) out.labels.push_back(labels[static_cast<size_t>(r)]);
    if (!targets.empty()) out.targets.push_back(targets[static_cast<size_t>(r)]);
  }
  return out;
}

namespace {
// Fisher-Yates with mixtrain's counter-based generator, so the order depends only on the seed
// (std::shuffle's algorithm differs between standard libraries).
void shuffle_rows(std::vector<int64_t>& v, Generator& gen) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[gen.next_u64() % i]);
}
}  // namespace

std::pair<Dataset, Dataset> train_test_split(const Dataset& data, double test_fraction, uint64_t seed) {
  MT_CHECK(data.size >= 2, "train_test_split: need at least 2 rows, got ", data.size);
  MT_CHECK(test_fraction > 0 && test_fraction < 1, "train_test_split: test_fraction must be in (0, 1), got ",
           test_fraction);
  std::vector<int64_t> rows(static_cast<size_t>(data.size));
  std::iota(rows.begin(), rows.end(), 0);
  Generator gen(seed);
  shuffle_rows(rows, gen);
  int64_t n_test = static_cast<int64_t>(std::llround(test_fraction * static_cast<double>(data.size)));
  n_test = std::clamp<int64_t>(n_test, 1, data.size - 1);
  std::vector<int64_t> test(rows.begin(), rows.begin() + n_test), train(rows.begin() + n_test, rows.end());
  return {data.subset(train), data.subset(test)};
}

Standardizer Standardizer::fit(const std::vector<float>& values, int64_t columns) {
  MT_CHECK(columns > 0 && !values.empty() && values.size() % static_cast<size_t>(columns) == 0,
           "Standardizer::fit: ", values.size(), " values do not form rows of ", columns);
  const size_t rows = values.size() / static_cast<size_t>(columns), c = static_cast<size_t>(columns);
  std::vector<double> mean(c, 0.0), var(c, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < c; ++j) mean[j] += values[r * c + j];
  for (auto& m : mean) m /= static_cast<double>(rows);
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < c; ++j) var[j] += (values[r * c + j] - mean[j]) * (values[r * c + j] - mean[j]);
  Standardizer s;
  for (size_t j = 0; j < c; ++j) {
    const double sd = std::sqrt(var[j] / static_cast<double>(rows));
    s.mean.push_back(static_cast<float>(mean[j]));
    // A constant column stays centred instead of dividing by zero.
    s.std.push_back(sd > 1e-12 ? static_cast<float>(sd) : 1.0f);
  }
  return s;
}

void Standardizer::apply(std::vector<float>& values) const {
  const size_t c = mean.size();
  for (size_t i = 0; i < values.size(); ++i) values[i] = (values[i] - mean[i % c]) / std[i % c];
}

BatchIterator::BatchIterator(const Dataset& data, int64_t batch_size, uint64_t seed, bool shuffle, bool drop_last)
    : data_(&data), batch_size_(batch_size), shuffle_(shuffle), drop_last_(drop_last), gen_(seed) {
  data.check("BatchIterator");
  MT_CHECK(batch_size > 0, "BatchIterator: batch size must be positive, got ", batch_size);
  MT_CHECK(!drop_last || batch_size <= data.size, "BatchIterator: batch size ", batch_size,
           " exceeds the dataset's ", data.size, " rows with drop_last");
  order_.resize(static_cast<size_t>(data.size));
}

int64_t BatchIterator::batches_per_epoch() const {
  return drop_last_ ? data_->size / batch_size_ : (data_->size + batch_size_ - 1) / batch_size_;
}

void BatchIterator::start_epoch() {
  std::iota(order_.begin(), order_.end(), 0);
  if (shuffle_) shuffle_rows(order_, gen_);
  pos_ = 0;
  if (started_) ++epoch_;  // the first call only sets up epoch 0
  started_ = true;
}

bool BatchIterator::next(Batch& out) {
  if (!started_) start_epoch();
  const int64_t remaining = data_->size - pos_;
  if (remaining <= 0 || (drop_last_ && remaining < batch_size_)) {
    start_epoch();
    return false;
  }
  const int64_t end = pos_ + std::min(batch_size_, remaining);
  out = gather(pos_, end);
  pos_ = end;
  return true;
}

Batch BatchIterator::next_batch() {
  Batch b;
  if (!next(b)) next(b);  // an epoch boundary: the second call is the new epoch's first batch
  return b;
}

Batch BatchIterator::gather(int64_t begin, int64_t end) const {
  const int64_t n = end - begin, f = data_->features;
  std::vector<float> x(static_cast<size_t>(n * f));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = order_[static_cast<size_t>(begin + i)];
    std::copy_n(data_->x.begin() + r * f, f, x.begin() + i * f);
  }
  Batch b;
  b.x = from_vector(x, {n, f});
  if (data_->is_classification()) {
    std::vector<int64_t> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = data_->labels[static_cast<size_t>(order_[static_cast<size_t>(begin + i)])];
    b.y = from_vector(y, {n});
  } else {
    std::vector<float> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = data_->targets[static_cast<size_t>(order_[static_cast<size_t>(begin + i)])];
    b.y = from_vector(y, {n, 1});
  }
  return b;
}

void skip_batches(BatchIterator* loader, size_t& next_pregenerated, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (loader)
      loader->next_batch();
    else
      ++next_pregenerated;
  }
}

}  // namespace mixtrain::examples
