#include "common/dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mixtrain::examples {

namespace {

// Fisher-Yates with mixtrain's counter-based generator, so the split depends only on the seed
// (std::shuffle's algorithm differs between standard libraries).
void shuffle_rows(std::vector<int64_t>& v, Generator& gen) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[gen.next_u64() % i]);
}

Tensor rows_of(const Tensor& t, const std::vector<int64_t>& rows) {
  if (!t.defined()) return t;
  std::vector<Tensor> picked;
  for (int64_t r : rows) picked.push_back(t.select(0, r));
  return stack(picked, 0);
}

int64_t columns_of(const Tensor& values) {
  MT_CHECK(values.defined() && (values.dim() == 1 || values.dim() == 2) && values.dtype() == kFloat32 &&
               values.numel() > 0,
           "Standardizer: expected float32 [rows] or [rows, columns], got ",
           values.defined() ? values.summary() : std::string("undefined"));
  return values.dim() == 1 ? 1 : values.size(1);
}

}  // namespace

std::pair<data::TensorDataset, data::TensorDataset> train_test_split(const data::TensorDataset& d,
                                                                     double test_fraction, uint64_t seed) {
  MT_CHECK(d.size() >= 2, "train_test_split: need at least 2 rows, got ", d.size());
  MT_CHECK(test_fraction > 0 && test_fraction < 1, "train_test_split: test_fraction must be in (0, 1), got ",
           test_fraction);
  std::vector<int64_t> rows(static_cast<size_t>(d.size()));
  std::iota(rows.begin(), rows.end(), 0);
  Generator gen(seed);
  shuffle_rows(rows, gen);
  int64_t n_test = static_cast<int64_t>(std::llround(test_fraction * static_cast<double>(d.size())));
  n_test = std::clamp<int64_t>(n_test, 1, d.size() - 1);
  const std::vector<int64_t> test(rows.begin(), rows.begin() + n_test), train(rows.begin() + n_test, rows.end());
  NoGradGuard no_grad;
  return {data::TensorDataset(rows_of(d.data(), train), rows_of(d.target(), train)),
          data::TensorDataset(rows_of(d.data(), test), rows_of(d.target(), test))};
}

Standardizer Standardizer::fit(const Tensor& values_t) {
  const size_t c = static_cast<size_t>(columns_of(values_t));
  const std::vector<float> values = values_t.contiguous().to_vector<float>();
  const size_t rows = values.size() / c;
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

Tensor Standardizer::apply(const Tensor& values_t) const {
  const size_t c = static_cast<size_t>(columns_of(values_t));
  MT_CHECK(c == mean.size(), "Standardizer: fitted on ", mean.size(), " columns, applied to ", values_t.summary());
  std::vector<float> values = values_t.contiguous().to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i) values[i] = (values[i] - mean[i % c]) / std[i % c];
  return from_vector(values, values_t.shape());
}

}  // namespace mixtrain::examples
