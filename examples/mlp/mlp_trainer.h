#pragma once
// The MLP example's model and tasks, as a library so the `mixtrain` command line and the tests
// can run it: make_mlp_task(config) gives the shared loop's TrainTask, and run_mlp(config) trains
// it under AMP and evaluates, returning the per-step losses.
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <mixtrain/mixtrain.h>
#include "common/run_task.h"

namespace mixtrain::examples {

enum class MlpTask {
  FashionMnist,  // 784-256-128-10 classifier, cross-entropy
  Csv,           // regressor on a CSV's feature columns -> target column, MSE
  Synthetic,     // 215 inputs -> 1 regressor on data from a random teacher network, MSE, generated
                 // on the training device (no files)
};

struct MlpConfig {
  MlpTask task = MlpTask::FashionMnist;
  std::string data_dir = data::kFashionMnistDir;  // FashionMnist
  std::string csv_path;                     // Csv
  std::string target_column;                // Csv
  int64_t synthetic_samples = 8192;         // Synthetic: training rows (plus 1/8 as many test rows)
  std::vector<int64_t> hidden;              // hidden widths; empty: the task's default
  int64_t steps = 1000;
  int64_t batch_size = 128;
  double lr = 1e-3;
  uint64_t seed = 0;
  train::Precision precision = train::Precision::Fp16;
  Device device = train::default_device();
  int64_t log_every = 100;      // a progress line every this many steps (0: none)
  bool memory_plan = false;     // steps served from static memory plans (TrainOptions::memory_plan)
  std::ostream* log = nullptr;  // where progress lines go; nullptr: silent
};

struct MlpResult : RunSummary {  // description e.g. "fashion-mnist 784-256-128-10"
  double test_loss = 0;       // mean over the test set (regression: MSE on standardised targets)
  double test_accuracy = -1;  // classification only; -1 otherwise
  int64_t test_size = 0;
};

// The task for the shared loop; evaluate() fills nothing in a result, see run_mlp for that.
// Throws mixtrain::Error for bad configuration or data (a missing data set names its package).
std::unique_ptr<train::TrainTask> make_mlp_task(const MlpConfig& config);

// Trains with the shared loop (AMP per config.precision on config.device) and evaluates.
MlpResult run_mlp(const MlpConfig& config);

}  // namespace mixtrain::examples
