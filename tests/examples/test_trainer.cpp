// The one step (train::Trainer): stepping a Trainer by hand is train()'s run bit for bit; a step
// record has one JSON encoding, NaN included, and a malformed one is an Error; the library's
// planning (train/predict.h) of a task given as a factory predicts its measured step, fits a
// budget exactly, and ZeRO-1 shrinks the predicted optimizer state by the world size.
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include <mixtrain/train/predict.h>
#include <mixtrain/train/trainer.h>

#include "mlp/mlp_trainer.h"
#include "support/testing.h"

namespace ex = mixtrain::examples;
namespace tr = mixtrain::train;

namespace {

ex::MlpConfig small_mlp(int64_t batch, mixtrain::Device device) {
  ex::MlpConfig c;
  c.task = ex::MlpTask::Synthetic;
  c.synthetic_samples = std::max<int64_t>(64, 4 * batch);
  c.hidden = {64, 32};
  c.batch_size = batch;
  c.device = device;
  return c;
}

tr::TaskFactory mlp_factory() {
  return [](int64_t batch, mixtrain::Device device) { return ex::make_mlp_task(small_mlp(batch > 0 ? batch : 16, device)); };
}

}  // namespace

TEST(Trainer, SteppedByHandItIsTrainsRunBitForBit) {
  for (const tr::Precision p : {tr::Precision::Fp32, tr::Precision::Fp16, tr::Precision::Bf16}) {
    SCOPED_TRACE(tr::precision_name(p));
    tr::TrainOptions o;
    o.precision = p;
    o.steps = 6;
    const auto a = ex::make_mlp_task(small_mlp(16, mixtrain::Device::cpu()));
    const tr::TrainResult run = tr::train(*a, o);
    const auto b = ex::make_mlp_task(small_mlp(16, mixtrain::Device::cpu()));
    tr::Trainer trainer(*b, o);
    ASSERT_EQ(run.records.size(), 6u);
    for (const tr::StepRecord& r : run.records) {
      const tr::StepValues v = trainer.step();
      EXPECT_EQ(v.loss, r.loss) << "step " << r.step;
      EXPECT_EQ(v.skipped, r.skipped) << "step " << r.step;
      EXPECT_TRUE(v.params_finite);
    }
  }
}

TEST(Trainer, AStepRecordHasOneJsonEncodingWithNonFiniteAsNull) {
  tr::StepRecord r;
  r.step = 7;
  r.lr = 1e-3;
  r.loss = std::numeric_limits<double>::quiet_NaN();
  r.scale = 1024;
  r.skipped = true;
  r.grad_norm = std::numeric_limits<double>::infinity();
  r.seconds = 0.25;
  r.rank_rows = {3, 5};
  const nlohmann::json j = tr::step_record_json(r);
  EXPECT_TRUE(j.at("loss").is_null());
  EXPECT_TRUE(j.at("grad_norm").is_null());
  const tr::StepRecord back = tr::step_record_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(back.step, 7);
  EXPECT_TRUE(std::isnan(back.loss));
  EXPECT_TRUE(std::isnan(back.grad_norm));  // inf and NaN alike are null: read back as NaN
  EXPECT_EQ(back.scale, 1024);
  EXPECT_TRUE(back.skipped);
  EXPECT_EQ(back.rank_rows, (std::vector<int64_t>{3, 5}));
  nlohmann::json bad = j;
  bad["step"] = "seven";
  mixtrain::testing::expect_error([&] { tr::step_record_from_json(bad); }, {"step record", "malformed"});
}

TEST(Trainer, APredictionOfAFactorysTaskIsItsMeasuredStepAndFitsExactly) {
  tr::StepQuery q;
  q.batch_size = 64;
  for (const tr::Precision p : {tr::Precision::Fp32, tr::Precision::Bf16}) {
    SCOPED_TRACE(tr::precision_name(p));
    q.options.precision = p;
    const tr::StepPrediction predicted = tr::predict_step(mlp_factory(), q);
    const tr::StepMeasurement measured = tr::measure_step(mlp_factory(), q, mixtrain::Device::cpu());
    std::printf("%s: predicted peak %lld B, measured %lld B\n", tr::precision_name(p),
                static_cast<long long>(predicted.peak_bytes), static_cast<long long>(measured.peak_bytes));
    EXPECT_NEAR(static_cast<double>(predicted.peak_bytes), static_cast<double>(measured.peak_bytes),
                0.01 * static_cast<double>(measured.peak_bytes));
  }
  q.options.precision = tr::Precision::Fp32;
  q.batch_size = 300;
  const int64_t at_300 = tr::predict_step(mlp_factory(), q).peak_bytes;
  const tr::FitResult fit = tr::fit_batch(mlp_factory(), q, at_300, 1 << 16, tr::FitBy::Allocated);
  EXPECT_TRUE(fit.fits);
  EXPECT_EQ(fit.best.batch_size, 300);
  EXPECT_EQ(fit.over_batch, 301);
}

TEST(Trainer, AZeroOneRankIsPredictedWithItsShareOfTheOptimizerState) {
  tr::StepQuery q;
  q.batch_size = 8;
  q.global_batch_size = 32;
  const tr::StepPrediction whole = tr::predict_step(mlp_factory(), q);
  q.options.zero_stage = 1;
  q.world_size = 4;
  const tr::StepPrediction shard = tr::predict_step(mlp_factory(), q);
  EXPECT_EQ(whole.batch_size, 8);
  // AdamW's two moments shrink about four-fold (a rank's shard of DDP's buckets, padded).
  const int64_t saved = whole.persistent_bytes - shard.persistent_bytes;
  int64_t params = 0;
  for (const auto& t : mlp_factory()(32, mixtrain::Device::meta())->model().parameters()) params += t.nbytes();
  EXPECT_NEAR(static_cast<double>(saved), 0.75 * 2.0 * static_cast<double>(params), 0.05 * static_cast<double>(params));
  mixtrain::testing::expect_error(
      [&] {
        q.batch_size = 33;
        tr::predict_step(mlp_factory(), q);
      },
      {"a rank's batch of 33", "[1, 32]"});
}
