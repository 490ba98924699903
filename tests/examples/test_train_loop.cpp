// The shared training loop's checkpoint options: save_every writes every N steps as well as at
// the end, and a destination that cannot be written fails before the first step; training with
// memory plans keyed by batch shape.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "mlp/mlp_trainer.h"
#include "support/testing.h"

namespace ex = mixtrain::examples;
namespace tr = mixtrain::train;
namespace fs = std::filesystem;

namespace {

ex::MlpConfig tiny_mlp() {
  ex::MlpConfig c;
  c.task = ex::MlpTask::Synthetic;
  c.synthetic_samples = 256;
  c.hidden = {8};
  c.batch_size = 16;
  c.device = mixtrain::Device::cpu();
  return c;
}

int64_t saved_step(const fs::path& dir) {
  std::ifstream in(dir / "trainer.json");
  if (!in) return -1;
  return nlohmann::json::parse(in)["step"].get<int64_t>();
}

}  // namespace

TEST(TrainLoop, SaveEverySavesAtMultiplesAndAtTheEnd) {
  const fs::path dir = fs::temp_directory_path() / ("mt_save_every_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto task = ex::make_mlp_task(tiny_mlp());
  tr::TrainOptions o;
  o.device = mixtrain::Device::cpu();
  o.steps = 7;
  o.save_dir = (dir / "ckpt").string();
  o.save_every = 3;
  std::vector<int64_t> seen;  // the checkpoint's step when each step begins its report
  tr::train(*task, o, [&](const tr::StepRecord&) { seen.push_back(saved_step(dir / "ckpt")); });
  // Step s reports before its own save: saves after steps 3 and 6, then the last (7).
  EXPECT_EQ(seen, (std::vector<int64_t>{-1, -1, -1, 3, 3, 3, 6}));
  EXPECT_EQ(saved_step(dir / "ckpt"), 7);
  fs::remove_all(dir);
}

TEST(TrainLoop, UnwritableDestinationFailsBeforeTheFirstStep) {
  const fs::path file = fs::temp_directory_path() / ("mt_not_a_dir_" + std::to_string(::getpid()));
  std::ofstream(file) << "x";
  const auto task = ex::make_mlp_task(tiny_mlp());
  tr::TrainOptions o;
  o.device = mixtrain::Device::cpu();
  o.steps = 5;
  o.save_dir = (file / "ckpt").string();
  int steps = 0;
  mixtrain::testing::expect_error([&] { tr::train(*task, o, [&](const tr::StepRecord&) { ++steps; }); },
                                  {file.string(), "not a directory"});
  EXPECT_EQ(steps, 0);
  o.save_dir.clear();
  o.save_every = -1;
  mixtrain::testing::expect_error([&] { tr::train(*task, o); }, "save_every");
  fs::remove(file);
}

namespace {

// Batches of 16 rows, every fourth one of 7 (an epoch's last, partial batch): two batch shapes.
class TwoShapeTask : public tr::TrainTask {
 public:
  TwoShapeTask() {
    mixtrain::manual_seed(3);
    model_ = mixtrain::nn::Sequential(mixtrain::nn::Linear(12, 32), mixtrain::nn::ReLU(), mixtrain::nn::Linear(32, 1));
    mixtrain::Generator gen(11);
    for (int64_t rows : {16, 16, 16, 7}) batches_.push_back({mixtrain::randn({rows, 12}, gen), mixtrain::randn({rows, 1}, gen)});
  }
  mixtrain::nn::Module& model() override { return *model_; }
  std::vector<int64_t> prepare_batch() override {
    pending_ = draw();
    return shapes_key({pending_->first, pending_->second});
  }
  mixtrain::Tensor next_loss() override {
    const auto b = pending_ ? *pending_ : draw();
    pending_.reset();
    return mixtrain::nn::functional::mse_loss(model_->forward(b.first), b.second);
  }
  void skip_batches(int64_t n) override { next_ += static_cast<size_t>(n); }

 private:
  std::pair<mixtrain::Tensor, mixtrain::Tensor> draw() { return batches_[next_++ % batches_.size()]; }
  mixtrain::nn::Sequential model_{nullptr};
  std::vector<std::pair<mixtrain::Tensor, mixtrain::Tensor>> batches_;
  std::optional<std::pair<mixtrain::Tensor, mixtrain::Tensor>> pending_;
  size_t next_ = 0;
};

}  // namespace

// --memory-plan: the loop keys a plan per batch shape; losses and parameters are those of the
// unplanned loop bit for bit, in fp32 and under fp16 autocast with loss scaling.
TEST(TrainLoop, MemoryPlanTrainsBitIdenticallyWithOnePlanPerBatchShape) {
  for (const tr::Precision p : {tr::Precision::Fp32, tr::Precision::Fp16}) {
    SCOPED_TRACE(tr::precision_name(p));
    auto run = [&](bool planned, std::vector<float>& params) {
      TwoShapeTask task;
      tr::TrainOptions o;
      o.device = mixtrain::Device::cpu();
      o.precision = p;
      o.steps = 12;
      o.memory_plan = planned;
      const tr::TrainResult r = tr::train(task, o);
      for (const auto& t : task.model().parameters()) {
        const std::vector<float> v = t.to_vector<float>();
        params.insert(params.end(), v.begin(), v.end());
      }
      return r;
    };
    std::vector<float> plain_params, planned_params;
    const tr::TrainResult plain = run(false, plain_params), planned = run(true, planned_params);
    ASSERT_EQ(plain.records.size(), planned.records.size());
    for (size_t i = 0; i < plain.records.size(); ++i) {
      EXPECT_EQ(plain.records[i].loss, planned.records[i].loss) << "step " << i + 1;
      EXPECT_EQ(plain.records[i].grad_norm, planned.records[i].grad_norm) << "step " << i + 1;
    }
    EXPECT_EQ(plain_params, planned_params);
    EXPECT_EQ(plain.memory_plans, 0);
    EXPECT_EQ(plain.plan_hits, 0);
    EXPECT_EQ(planned.memory_plans, 2);  // 16 rows and 7 rows
    EXPECT_GT(planned.plan_hits, 0);
    // At most each plan's first replay misses (state made on the first step only; MEMORY.md).
    EXPECT_LE(planned.plan_misses, 2);
  }
}

// Under a launcher, plain "cuda" is each rank's own GPU, the one its NCCL communicator binds
// (LOCAL_RANK); a single process keeps GPU 0.
TEST(TrainLoop, EachRankOfSeveralTakesItsLocalRanksGpu) {
  mixtrain::distributed::LaunchEnv env;
  EXPECT_EQ(tr::rank_cuda_index(env), 0);
  env.world_size = 4;
  env.rank = 3;
  env.local_rank = 1;
  EXPECT_EQ(tr::rank_cuda_index(env), 1);
  env.world_size = 1;
  env.local_rank = 0;
  EXPECT_EQ(tr::rank_cuda_index(env), 0);
}

// A learning rate that makes the weights overflow: the run stops with an Error naming the first
// step whose loss is not finite (fp32), instead of training on to the end on NaN.
TEST(TrainLoop, ANonFiniteLossThatScalingCannotHelpStopsTheRun) {
  const auto task = ex::make_mlp_task(tiny_mlp());
  tr::TrainOptions o;
  o.device = mixtrain::Device::cpu();
  o.precision = tr::Precision::Fp32;
  o.steps = 20;
  o.lr = 1e30;  // finite in float32: the update applies it, and the next forward overflows
  std::vector<double> losses;
  const std::string msg =
      mixtrain::testing::error_of([&] { tr::train(*task, o, [&](const tr::StepRecord& r) { losses.push_back(r.loss); }); });
  ASSERT_FALSE(losses.empty());
  EXPECT_FALSE(std::isfinite(losses.back()));
  for (size_t i = 0; i + 1 < losses.size(); ++i) EXPECT_TRUE(std::isfinite(losses[i])) << i;
  EXPECT_TRUE(mixtrain::testing::error_contains(msg, {"step " + std::to_string(losses.size()), "loss"}));
}

// A rate the update cannot hold in float32 (1e308 is inf there): refused at step 1 before any
// weight is written, the error naming the step; no checkpoint is written.
TEST(TrainLoop, ARateTheOptimizerCannotApplyStopsTheRunBeforeTheUpdate) {
  const mixtrain::testing::TempDir tmp;
  for (const tr::Precision p : {tr::Precision::Fp32, tr::Precision::Fp16, tr::Precision::Bf16}) {
    SCOPED_TRACE(tr::precision_name(p));
    const auto task = ex::make_mlp_task(tiny_mlp());
    std::vector<std::vector<float>> before;
    for (const auto& t : task->model().parameters()) before.push_back(t.to_vector<float>());
    tr::TrainOptions o;
    o.device = mixtrain::Device::cpu();
    o.precision = p;
    o.steps = 5;
    o.lr = 1e308;
    o.save_dir = tmp.path + "/ckpt";
    int steps = 0;
    mixtrain::testing::expect_error([&] { tr::train(*task, o, [&](const tr::StepRecord&) { ++steps; }); },
                                    {"step 1: ", "AdamW.step", "lr", "before any weight"});
    EXPECT_EQ(steps, 0);
    std::vector<std::vector<float>> after;
    for (const auto& t : task->model().parameters()) after.push_back(t.to_vector<float>());
    EXPECT_EQ(after, before);
    EXPECT_FALSE(fs::exists(o.save_dir));
  }
}

namespace {

// One Linear layer fed inputs of 1e-30: the loss stays finite while AdamW moves the bias by lr
// each step, so at lr 3e37 the update itself overflows it (after about 11 steps), loss still finite.
class RunawayBiasTask : public tr::TrainTask {
 public:
  RunawayBiasTask() {
    mixtrain::manual_seed(5);
    model_ = mixtrain::nn::Sequential(mixtrain::nn::Linear(4, 1));
  }
  mixtrain::nn::Module& model() override { return *model_; }
  mixtrain::Tensor next_loss() override { return model_->forward(mixtrain::full({1, 4}, 1e-30)).sum(); }
  void skip_batches(int64_t) override {}

 private:
  mixtrain::nn::Sequential model_{nullptr};
};

}  // namespace

// The loss before an update says nothing about the weights after it: the loop checks those
// (one fused scan a step) and stops naming the step and the parameter, and the last checkpoint is
// the step before, with finite weights.
TEST(TrainLoop, ParametersTheUpdateMakesNonFiniteStopTheRunNamingTheStepAndParameter) {
  const mixtrain::testing::TempDir tmp;
  for (const bool planned : {false, true}) {
    SCOPED_TRACE(planned ? "memory plan" : "plain");
    RunawayBiasTask task;
    tr::TrainOptions o;
    o.device = mixtrain::Device::cpu();
    o.precision = tr::Precision::Fp32;
    o.steps = 40;
    o.lr = 3e37;
    o.clip_norm = 0;
    o.constant_lr = true;
    o.memory_plan = planned;
    o.save_dir = tmp.path + (planned ? "/planned" : "/plain");
    o.save_every = 1;
    std::vector<double> losses;
    const std::string msg = mixtrain::testing::error_of(
        [&] { tr::train(task, o, [&](const tr::StepRecord& r) { losses.push_back(r.loss); }); });
    ASSERT_GE(losses.size(), 5u) << msg;
    ASSERT_LT(losses.size(), 40u) << msg;
    for (double l : losses) EXPECT_TRUE(std::isfinite(l));
    const int64_t failed = static_cast<int64_t>(losses.size());
    EXPECT_TRUE(mixtrain::testing::error_contains(
        msg, {"step " + std::to_string(failed) + ": ", "parameter \"0.bias\"", "-inf", "non-finite"}))
        << msg;
    EXPECT_EQ(saved_step(o.save_dir), failed - 1);
  }
}
