#pragma once
// In-memory datasets for the example trainers and a shuffling batch iterator over them.
// Public mixtrain API only.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <mixtrain/mixtrain.h>

namespace mixtrain::examples {

// Rows of float features with either a class label (classification) or a float target
// (regression) per row.
struct Dataset {
  int64_t size = 0;
  int64_t features = 0;
  std::vector<float> x;         // [size, features], row-major
  std::vector<int64_t> labels;  // classification: one class index per row
  std::vector<float> targets;   // regression: one value per row
  std::vector<std::string> feature_names;  // CSV columns; empty otherwise

  bool is_classification() const { return !labels.empty(); }
  // Throws mixtrain::Error when the vectors disagree with size/features.
  void check(const std::string& what) const;
  // Rows `rows` (any order) as a new dataset.
  Dataset subset(const std::vector<int64_t>& rows) const;
};

// Splits off a random test_fraction of the rows (at least one row each side).
std::pair<Dataset, Dataset> train_test_split(const Dataset& data, double test_fraction, uint64_t seed);

// Per-column mean and standard deviation, fitted on one dataset and applied to others, so the
// test set is scaled with the training set's statistics.
struct Standardizer {
  std::vector<float> mean, std;
  static Standardizer fit(const std::vector<float>& values, int64_t columns);
  void apply(std::vector<float>& values) const;
};

// x: float32 [B, features]; y: int64 [B] for classification, float32 [B, 1] for regression.
struct Batch {
  Tensor x;
  Tensor y;
};

// Walks a dataset in batches, reshuffled every epoch from `seed` (a given seed gives the same
// batches on every run). The dataset must outlive the iterator.
class BatchIterator {
 public:
  BatchIterator(const Dataset& data, int64_t batch_size, uint64_t seed, bool shuffle = true, bool drop_last = false);

  // The next batch of the current epoch; false (and `out` untouched) once the epoch is done,
  // after which the next call starts a new epoch.
  bool next(Batch& out);
  // The next batch, starting new epochs as needed: for loops counted in steps.
  Batch next_batch();

  // Epochs completed (next() has returned false this many times, or next_batch() wrapped).
  int64_t epoch() const { return epoch_; }
  int64_t batches_per_epoch() const;

 private:
  void start_epoch();
  Batch gather(int64_t begin, int64_t end) const;

  const Dataset* data_;
  int64_t batch_size_;
  bool shuffle_, drop_last_;
  Generator gen_;
  std::vector<int64_t> order_;
  int64_t pos_ = 0;
  int64_t epoch_ = 0;
  bool started_ = false;
};

// Skips n batches of a trainer's data: the loader's when it has one, else the index into its
// pre-generated batches (for resuming at a checkpoint's step).
void skip_batches(BatchIterator* loader, size_t& next_pregenerated, int64_t n);

}  // namespace mixtrain::examples
