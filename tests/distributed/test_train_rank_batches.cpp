// train::train resolves the launcher's --rank-batches auto (MIXTRAIN_RANK_BATCHES=auto) itself when
// TrainOptions::planning_task says how to build the task again: each rank's share of the global
// batch is the largest whose predicted step fits its $MIXTRAIN_RANK_MEMORY, the shares together
// the whole batch; without the factory every rank refuses, saying what to give.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "mixtrain/mixtrain.h"
#include "ranks.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;
namespace tr = mixtrain::train;
using mt_dist_test::run_ranks;

namespace {

constexpr int64_t kGlobal = 512, kInputs = 16;

// A regression MLP whose every rank draws the same global batch (same seed, same draws).
class RegressionTask : public tr::TrainTask {
 public:
  RegressionTask(int64_t batch, mt::Device device) : batch_(batch), device_(device) {
    mt::manual_seed(3);
    model_ = mt::nn::Sequential(mt::nn::Linear(kInputs, 256), mt::nn::ReLU(), mt::nn::Linear(256, 1));
    model_->to(device);
  }
  mt::nn::Module& model() override { return *model_; }
  mt::Tensor next_loss() override {
    const mt::TensorOptions on = mt::TensorOptions().device(device_);
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

tr::TaskFactory factory() {
  return [](int64_t batch, mt::Device device) { return std::make_unique<RegressionTask>(batch > 0 ? batch : kGlobal, device); };
}

tr::TrainOptions options() {
  tr::TrainOptions o;
  o.precision = tr::Precision::Fp32;
  o.steps = 2;
  return o;
}

// The predicted peak of one rank's step on `rows` of the global batch.
int64_t rank_peak(int64_t rows) {
  tr::StepQuery q;
  q.options = options();
  q.batch_size = rows;
  q.global_batch_size = kGlobal;
  return tr::predict_step(factory(), q).peak_bytes;
}

}  // namespace

MT_SCENARIO(train_sizes_rank_batches_by_memory) {
  RegressionTask task(kGlobal, mt::Device::cpu());
  tr::TrainOptions o = options();
  o.planning_task = factory();
  std::vector<tr::StepRecord> records;
  const tr::TrainResult result = tr::train(task, o, [&](const tr::StepRecord& r) { records.push_back(r); });
  const int rank = dist::default_group().rank();
  std::fprintf(stderr, "%s\n", result.rank_shares_report.c_str());
  SC_CHECK(records.size() == 2);
  SC_CHECK(!result.rank_shares_report.empty());
  for (const tr::StepRecord& r : records) {
    SC_CHECK(r.rank_rows.size() == 2);
    SC_CHECK(r.rank_rows[0] + r.rank_rows[1] == kGlobal);
    SC_CHECK(r.rank_rows[0] > r.rank_rows[1]);
  }
  // This rank's share fits its own budget, by the same prediction.
  const int64_t budget = mt::memory::parse_bytes(std::getenv(dist::kRankMemoryEnv), "budget");
  SC_CHECK(rank_peak(records[0].rank_rows[static_cast<size_t>(rank)]) <= budget);
  return 0;
}

MT_SCENARIO(train_without_planning_task_refuses_auto) {
  RegressionTask task(kGlobal, mt::Device::cpu());
  try {
    tr::train(task, options());
  } catch (const mt::Error& e) {
    SC_CHECK(std::string(e.what()).find("planning_task") != std::string::npos);
    return 0;
  }
  return 1;
}

TEST(TrainRankBatches, TrainSizesEachRanksShareByADryRunOfItsOwnStep) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  // Budgets that hold about 360 and 200 of the 512 rows: neither rank holds the batch alone.
  const std::string b0 = std::to_string(rank_peak(360)), b1 = std::to_string(rank_peak(200));
  const std::string auto_env = std::string(dist::kRankBatchesEnv) + "=auto";
  const std::string mem = std::string(dist::kRankMemoryEnv) + "=";
  const auto res = run_ranks("train_sizes_rank_batches_by_memory", 2, std::chrono::seconds(90),
                             {{-1, {auto_env}}, {0, {mem + b0}}, {1, {mem + b1}}});
  for (const auto& rr : res) EXPECT_EQ(rr.exit_code, 0) << mt_dist_test::describe(res);
  const auto refused =
      run_ranks("train_without_planning_task_refuses_auto", 2, std::chrono::seconds(60), {{-1, {auto_env}}});
  for (const auto& rr : refused) EXPECT_EQ(rr.exit_code, 0) << mt_dist_test::describe(refused);
}
