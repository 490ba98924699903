// A trainer of a user's own, written against the installed package: its model and loss as a
// train::TrainTask, and from the library, with no memory code of its own, what `mixtrain memory`
// answers for the example models (docs/MEMORY.md, "Your own trainer"): the step's predicted
// peak (a dry run of the Trainer's step on meta), that step measured for real, and the largest
// batch whose step fits a budget. Exits 1 naming what disagrees.
#include <mixtrain/mixtrain.h>

#include <cmath>
#include <cstdio>
#include <memory>

namespace mt = mixtrain;
namespace train = mixtrain::train;

namespace {

constexpr int64_t kInputs = 64;

class RegressionTask : public train::TrainTask {
 public:
  RegressionTask(int64_t batch, mt::Device device) : batch_(batch > 0 ? batch : 32), device_(device) {
    mt::manual_seed(0);
    model_ = mt::nn::Sequential(mt::nn::Linear(kInputs, 512), mt::nn::ReLU(), mt::nn::Linear(512, 1));
    model_->to(device);
  }
  mt::nn::Module& model() override { return *model_; }
  mt::Tensor next_loss() override {
    const mt::TensorOptions on = mt::TensorOptions().device(device_);
    // On meta nothing is computed, so no values are drawn.
    mt::Tensor x = device_.is_meta() ? mt::empty({batch_, kInputs}, on) : mt::randn({batch_, kInputs}, on);
    mt::Tensor y = device_.is_meta() ? mt::empty({batch_, 1}, on) : mt::randn({batch_, 1}, on);
    take_shard(x, y);
    return mt::nn::functional::mse_loss(model_->forward(x), y);
  }
  void skip_batches(int64_t) override {}
  int64_t batch_size() const override { return batch_; }

 private:
  int64_t batch_;
  mt::Device device_;
  mt::nn::Sequential model_{nullptr};
};

int fail(const char* what, long long a, long long b) {
  std::fprintf(stderr, "own_trainer: %s (%lld, %lld)\n", what, a, b);
  return 1;
}

}  // namespace

int main() {
  const train::TaskFactory make_task = [](int64_t batch, mt::Device device) {
    return std::make_unique<RegressionTask>(batch, device);
  };
  train::StepQuery query;
  query.options.precision = train::Precision::Fp32;
  query.target = mt::Device::cpu();
  query.batch_size = 256;
  const train::StepPrediction predicted = train::predict_step(make_task, query);
  const train::StepMeasurement measured = train::measure_step(make_task, query, mt::Device::cpu());
  std::printf("batch 256: predicted peak %lld B, measured %lld B\n", static_cast<long long>(predicted.peak_bytes),
              static_cast<long long>(measured.peak_bytes));
  if (predicted.peak_bytes <= 0 ||
      std::abs(static_cast<double>(predicted.peak_bytes - measured.peak_bytes)) > 0.01 * measured.peak_bytes)
    return fail("the predicted peak is not within 1% of the measured one", predicted.peak_bytes, measured.peak_bytes);
  // A budget between the peaks of batches 1000 and 1001 fits 1000 exactly.
  query.batch_size = 1000;
  const int64_t at_1000 = train::predict_step(make_task, query).peak_bytes;
  query.batch_size = 1001;
  const int64_t at_1001 = train::predict_step(make_task, query).peak_bytes;
  if (at_1001 <= at_1000) return fail("the peak does not grow with the batch", at_1000, at_1001);
  const train::FitResult fit = train::fit_batch(make_task, query, at_1000, 1 << 20, train::FitBy::Allocated);
  std::printf("--fit %lld B: batch %lld (%d dry runs)\n", static_cast<long long>(at_1000),
              static_cast<long long>(fit.best.batch_size), fit.dry_runs);
  if (!fit.fits || fit.best.batch_size != 1000) return fail("the fit is not batch 1000", fit.best.batch_size, 1000);
  // And the task trains with the same Trainer whose step was planned.
  RegressionTask task(64, mt::Device::cpu());
  train::TrainOptions options;
  options.precision = train::Precision::Fp32;
  options.steps = 3;
  const train::TrainResult result = train::train(task, options);
  if (result.records.size() != 3 || !std::isfinite(result.records.back().loss))
    return fail("training did not run its 3 steps to a finite loss", static_cast<long long>(result.records.size()), 3);
  return 0;
}
