// MLP training (forward, MSE, backward, Adam) with a static memory plan against the same training
// without one: losses, gradients and parameters identical bit for bit; kept outputs keep their
// values; planned steps make no allocator search and no backing allocation; a last partial batch
// misses the plan and still trains the same; a step that throws while planned leaves no plan.
#include <cstring>
#include <vector>

#include "mixtrain/memory/step_plan.h"
#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace nn = mixtrain::nn;
namespace memory = mixtrain::memory;
using mt::Tensor;

namespace {

struct Trainer {
  nn::Sequential model;
  std::unique_ptr<mt::optim::Adam> opt;

  Trainer() {
    mt::manual_seed(3);
    model = nn::Sequential(nn::Linear(24, 64), nn::ReLU(), nn::Linear(64, 32), nn::ReLU(), nn::Linear(32, 1));
    opt = std::make_unique<mt::optim::Adam>(model->parameters(), mt::optim::AdamOptions().lr(1e-2));
  }

  // One step; zero_grad at its end lets the gradients die inside it (then they are planned too).
  Tensor step(const Tensor& x, const Tensor& y, bool zero_grad_at_end = false) {
    if (!zero_grad_at_end) opt->zero_grad();
    Tensor loss = nn::functional::mse_loss(model->forward(x), y);
    loss.backward();
    opt->step();
    if (zero_grad_at_end) opt->zero_grad();
    return loss;
  }
};

struct Batch {
  Tensor x, y;
};

std::vector<Batch> batches(int n, int64_t size, int64_t last_size = 0) {
  mt::manual_seed(11);
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) {
    const int64_t b = i == n - 1 && last_size ? last_size : size;
    out.push_back({mt::randn({b, 24}), mt::randn({b, 1})});
  }
  return out;
}

std::vector<uint32_t> bits(const Tensor& t) {
  const std::vector<float> v = t.to_vector<float>();
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// Every parameter's values and gradient, bit for bit.
std::vector<std::vector<uint32_t>> snapshot(const Trainer& t) {
  std::vector<std::vector<uint32_t>> s;
  for (const Tensor& p : t.model->parameters()) {
    s.push_back(bits(p));
    if (p.grad().defined()) s.push_back(bits(p.grad()));
  }
  return s;
}

memory::Stats cpu_stats() { return memory::stats(mt::Device::cpu()); }

TEST(PlannedTraining, LossesGradientsAndParametersAreBitIdentical) {
  const auto data = batches(6, 32);
  Trainer plain, planned;
  std::vector<std::vector<uint32_t>> plain_loss, planned_loss;
  std::vector<std::vector<std::vector<uint32_t>>> plain_state, planned_state;
  for (const Batch& b : data) {
    plain_loss.push_back(bits(plain.step(b.x, b.y)));
    plain_state.push_back(snapshot(plain));
  }

  const int64_t misses = cpu_stats().num_plan_misses;
  Tensor loss;
  memory::StepPlan plan = memory::plan_step(mt::Device::cpu(), [&] { loss = planned.step(data[0].x, data[0].y); });
  planned_loss.push_back(bits(loss));
  planned_state.push_back(snapshot(planned));
  EXPECT_GT(plan.num_planned(), 10);
  EXPECT_LT(plan.num_planned(), plan.num_requests());  // the loss and the gradients outlive the step
  memory::Stats second;
  for (size_t i = 1; i < data.size(); ++i) {
    if (i == 2) second = cpu_stats();
    const int64_t hits = cpu_stats().num_plan_hits;
    loss = plan.run([&] { return planned.step(data[i].x, data[i].y); });
    EXPECT_GT(cpu_stats().num_plan_hits, hits) << "step " << i << " took nothing from the arena";
    planned_loss.push_back(bits(loss));
    planned_state.push_back(snapshot(planned));
  }
  EXPECT_EQ(planned_loss, plain_loss);
  EXPECT_EQ(planned_state, plain_state);
  // The first replay may adopt the steady state (Adam's moments are made on the first step only);
  // from the second on, no miss and no backing allocation.
  EXPECT_LE(cpu_stats().num_plan_misses - misses, 1);
  EXPECT_EQ(cpu_stats().num_plan_misses, second.num_plan_misses);
  EXPECT_EQ(cpu_stats().num_backing_allocs, second.num_backing_allocs);
}

TEST(PlannedTraining, PlannedStepsMakeNoSearchAndNoBackingAllocation) {
  const auto data = batches(6, 32);
  Trainer plain, planned;
  std::vector<float> plain_loss, planned_loss;
  for (const Batch& b : data) plain_loss.push_back(plain.step(b.x, b.y, true).item<float>());

  // Nothing outlives these steps: the loss leaves as a float and the gradients die at zero_grad.
  auto step = [&](const Batch& b) { return planned.step(b.x, b.y, true).item<float>(); };
  float first = 0;
  memory::StepPlan plan = memory::plan_step(mt::Device::cpu(), [&] { first = step(data[0]); });
  planned_loss.push_back(first);
  EXPECT_EQ(plan.num_planned(), plan.num_requests() - 2 * 6) << "all but Adam's moments of the 6 parameters";
  EXPECT_LE(plan.arena_bytes(), plan.first_fit_bytes());
  EXPECT_GE(plan.arena_bytes(), plan.lower_bound_bytes());
  planned_loss.push_back(plan.run([&] { return step(data[1]); }));
  const memory::Stats before = cpu_stats();
  for (size_t i = 2; i < data.size(); ++i) planned_loss.push_back(plan.run([&] { return step(data[i]); }));
  const memory::Stats after = cpu_stats();
  EXPECT_EQ(after.num_searches, before.num_searches);
  EXPECT_EQ(after.num_backing_allocs, before.num_backing_allocs);
  EXPECT_EQ(after.num_allocs, before.num_allocs) << "a request reached the caching allocator";
  EXPECT_EQ(after.num_plan_misses, before.num_plan_misses);
  EXPECT_EQ(after.num_plan_hits - before.num_plan_hits, 4 * plan.num_planned());
  ASSERT_EQ(planned_loss.size(), plain_loss.size());
  for (size_t i = 0; i < plain_loss.size(); ++i)
    EXPECT_EQ(std::memcmp(&planned_loss[i], &plain_loss[i], sizeof(float)), 0) << "step " << i;
}

TEST(PlannedTraining, AutocastAndGradScalerStepsAreBitIdentical) {
  const auto data = batches(6, 32);
  Trainer plain, planned;
  mt::amp::GradScaler plain_scaler, planned_scaler;
  auto amp_step = [](Trainer& t, mt::amp::GradScaler& scaler, const Batch& b) {
    t.opt->zero_grad();
    Tensor loss;
    {
      mt::amp::AutocastGuard autocast(mt::DeviceType::CPU, mt::kFloat16);
      loss = nn::functional::mse_loss(t.model->forward(b.x), b.y);
    }
    scaler.scale(loss).backward();
    scaler.step(*t.opt);
    scaler.update();
    return loss;
  };
  std::vector<std::vector<uint32_t>> plain_loss, planned_loss;
  for (const Batch& b : data) plain_loss.push_back(bits(amp_step(plain, plain_scaler, b)));
  Tensor loss;
  memory::StepPlan plan =
      memory::plan_step(mt::Device::cpu(), [&] { loss = amp_step(planned, planned_scaler, data[0]); });
  planned_loss.push_back(bits(loss));
  memory::Stats second;
  for (size_t i = 1; i < data.size(); ++i) {
    if (i == 2) second = cpu_stats();
    planned_loss.push_back(bits(plan.run([&] { return amp_step(planned, planned_scaler, data[i]); })));
  }
  EXPECT_EQ(planned_loss, plain_loss);
  EXPECT_EQ(snapshot(planned), snapshot(plain));
  EXPECT_EQ(planned_scaler.get_scale(), plain_scaler.get_scale());
  EXPECT_EQ(cpu_stats().num_plan_misses, second.num_plan_misses);
  EXPECT_GT(cpu_stats().num_plan_hits, second.num_plan_hits);
}

TEST(PlannedTraining, KeptOutputsKeepTheirValues) {
  const auto data = batches(5, 16);
  Trainer plain, planned;
  std::vector<Tensor> plain_out, planned_out;
  for (const Batch& b : data) {
    plain.opt->zero_grad();
    Tensor pred = plain.model->forward(b.x);
    nn::functional::mse_loss(pred, b.y).backward();
    plain.opt->step();
    plain_out.push_back(pred.detach());
  }
  auto step = [&](const Batch& b) {
    planned.opt->zero_grad();
    Tensor pred = planned.model->forward(b.x);
    nn::functional::mse_loss(pred, b.y).backward();
    planned.opt->step();
    return pred.detach();  // kept by the caller across the following steps
  };
  memory::StepPlan plan = memory::plan_step(mt::Device::cpu(), [&] { planned_out.push_back(step(data[0])); });
  for (size_t i = 1; i < data.size(); ++i) planned_out.push_back(plan.run([&] { return step(data[i]); }));
  ASSERT_EQ(planned_out.size(), plain_out.size());
  for (size_t i = 0; i < plain_out.size(); ++i) EXPECT_EQ(bits(planned_out[i]), bits(plain_out[i])) << "output " << i;
}

TEST(PlannedTraining, ALastPartialBatchMissesAndTrainsTheSame) {
  auto data = batches(6, 32, 20);
  data.push_back(batches(1, 32)[0]);  // and a full batch after it
  Trainer plain, planned;
  std::vector<std::vector<uint32_t>> plain_loss, planned_loss;
  for (const Batch& b : data) plain_loss.push_back(bits(plain.step(b.x, b.y)));
  Tensor loss;
  memory::StepPlan plan = memory::plan_step(mt::Device::cpu(), [&] { loss = planned.step(data[0].x, data[0].y); });
  planned_loss.push_back(bits(loss));
  for (size_t i = 1; i + 2 < data.size(); ++i)
    planned_loss.push_back(bits(plan.run([&] { return planned.step(data[i].x, data[i].y); })));
  const int64_t misses = cpu_stats().num_plan_misses;
  planned_loss.push_back(bits(plan.run([&] { return planned.step(data[5].x, data[5].y); })));  // 20 rows
  EXPECT_EQ(cpu_stats().num_plan_misses, misses + 1);
  const int64_t hits = cpu_stats().num_plan_hits;
  planned_loss.push_back(bits(plan.run([&] { return planned.step(data[6].x, data[6].y); })));
  EXPECT_EQ(cpu_stats().num_plan_misses, misses + 1);
  EXPECT_EQ(cpu_stats().num_plan_hits - hits, plan.num_planned());
  EXPECT_EQ(planned_loss, plain_loss);
  EXPECT_EQ(snapshot(planned), snapshot(plain));
}

TEST(PlannedTraining, APlanCacheGivesThePartialBatchItsOwnPlan) {
  // Two epochs of three batches, the last of each 20 rows instead of 32.
  auto epoch = batches(3, 32, 20);
  std::vector<Batch> data = epoch;
  data.insert(data.end(), epoch.begin(), epoch.end());
  Trainer plain, planned;
  std::vector<std::vector<uint32_t>> plain_loss, planned_loss;
  for (const Batch& b : data) plain_loss.push_back(bits(plain.step(b.x, b.y)));
  memory::PlanCache plans(mt::Device::cpu());
  memory::Stats second_epoch;
  for (size_t i = 0; i < data.size(); ++i) {
    if (i == 3) second_epoch = cpu_stats();
    const Batch& b = data[i];
    planned_loss.push_back(bits(plans.run(b.x.shape(), [&] { return planned.step(b.x, b.y); })));
  }
  EXPECT_EQ(plans.size(), 2u);
  ASSERT_NE(plans.plan({20, 24}), nullptr);
  EXPECT_LT(plans.plan({20, 24})->arena_bytes(), plans.plan({32, 24})->arena_bytes());
  EXPECT_EQ(cpu_stats().num_plan_misses, second_epoch.num_plan_misses) << "the second epoch replays both plans";
  EXPECT_EQ(cpu_stats().num_plan_hits - second_epoch.num_plan_hits,
            2 * plans.plan({32, 24})->num_planned() + plans.plan({20, 24})->num_planned());
  EXPECT_EQ(planned_loss, plain_loss);
  EXPECT_EQ(snapshot(planned), snapshot(plain));
}

TEST(PlannedTraining, AStepThatThrowsLeavesNoPlan) {
  const auto data = batches(2, 16);
  Trainer t;
  const Tensor wrong_y = mt::randn({16, 3});
  const int64_t allocated = cpu_stats().allocated_bytes;
  mt::testing::expect_error(
      [&] { memory::plan_step(mt::Device::cpu(), [&] { return t.step(data[0].x, wrong_y); }); }, "mse_loss");
  EXPECT_EQ(cpu_stats().allocated_bytes, allocated);
  // Nothing is left recording or replaying: a plan made now replays.
  const int64_t hits = cpu_stats().num_plan_hits;
  memory::StepPlan plan = memory::plan_step(mt::Device::cpu(), [&] { t.step(data[0].x, data[0].y, true); });
  plan.run([&] { t.step(data[1].x, data[1].y, true); });
  EXPECT_GT(cpu_stats().num_plan_hits, hits);
}

}  // namespace
