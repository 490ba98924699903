// The MLP training step of bench_mlp_step (215-1000-500-1, ReLU, MSE, Adam, fp32 on the CPU)
// unplanned and replayed from a static memory plan (memory/step_plan.h), at batch 512 and 32.
// The step zeroes gradients at its end so nothing but the returned loss value outlives it, and
// the planned variant takes every request from the arena. Counters give the plan's sizes:
// arena, lower bound and Caffe-style first-fit slots, in bytes. Compare the two variants as
// medians of alternating runs, e.g.
//   build/bench/bench_step_plan --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true
//     --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "mixtrain/memory/step_plan.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;

namespace {

struct MlpStep {
  mt::nn::Sequential model;
  std::unique_ptr<mt::optim::Adam> opt;
  mt::Tensor x, y;

  explicit MlpStep(int64_t batch) {
    mt::manual_seed(0);
    model = mt::nn::Sequential(mt::nn::Linear(215, 1000), mt::nn::ReLU(), mt::nn::Linear(1000, 500), mt::nn::ReLU(),
                               mt::nn::Linear(500, 1));
    opt = std::make_unique<mt::optim::Adam>(model->parameters(), mt::optim::AdamOptions().lr(1e-3));
    x = mt::randn({batch, 215});
    y = mt::randn({batch, 1});
  }

  float operator()() {
    mt::Tensor loss = mt::nn::functional::mse_loss(model->forward(x), y);
    loss.backward();
    opt->step();
    opt->zero_grad();
    return loss.item<float>();
  }
};

void BM_MlpStepUnplanned(benchmark::State& state) {
  MlpStep step(state.range(0));
  for (int i = 0; i < 20; ++i) step();
  for (auto _ : state) benchmark::DoNotOptimize(step());
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void BM_MlpStepPlanned(benchmark::State& state) {
  MlpStep step(state.range(0));
  mt::memory::StepPlan plan = mt::memory::plan_step(mt::Device::cpu(), step);
  for (int i = 0; i < 20; ++i) plan.run(step);
  const mt::memory::Stats before = mt::memory::stats(mt::Device::cpu());
  for (auto _ : state) benchmark::DoNotOptimize(plan.run(step));
  const mt::memory::Stats after = mt::memory::stats(mt::Device::cpu());
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["arena_bytes"] = static_cast<double>(plan.arena_bytes());
  state.counters["lower_bound_bytes"] = static_cast<double>(plan.lower_bound_bytes());
  state.counters["first_fit_bytes"] = static_cast<double>(plan.first_fit_bytes());
  state.counters["planned_requests"] = static_cast<double>(plan.num_planned());
  // Both should be 0: every request of a timed step came from the arena.
  state.counters["searches"] = static_cast<double>(after.num_searches - before.num_searches);
  state.counters["misses"] = static_cast<double>(after.num_plan_misses - before.num_plan_misses);
}

}  // namespace

BENCHMARK(BM_MlpStepUnplanned)->Arg(512)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_MlpStepPlanned)->Arg(512)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
