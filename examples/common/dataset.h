#pragma once
// Tabular preprocessing for the example trainers, on top of mixtrain::data: a seeded train/test
// split and per-column standardisation. Public mixtrain API only.
#include <cstdint>
#include <utility>
#include <vector>

#include <mixtrain/mixtrain.h>

namespace mixtrain::examples {

// Splits off a random test_fraction of the rows (at least one row each side).
std::pair<data::TensorDataset, data::TensorDataset> train_test_split(const data::TensorDataset& data,
                                                                     double test_fraction, uint64_t seed);

// Per-column mean and standard deviation of float32 [rows, columns] (or [rows]: one column),
// fitted on one dataset and applied to others, so the test set is scaled with the training
// set's statistics.
struct Standardizer {
  std::vector<float> mean, std;
  static Standardizer fit(const Tensor& values);
  Tensor apply(const Tensor& values) const;
};

}  // namespace mixtrain::examples
