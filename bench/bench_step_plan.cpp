// The MLP training step of bench_mlp_step (215-1000-500-1, ReLU, MSE, Adam, fp32 on the CPU)
// unplanned and replayed from a static memory plan (memory/step_plan.h), at batch 512 and 32.
// The step zeroes gradients at its end so nothing but the returned loss value outlives it, and
// the planned variant takes every request from the arena. Counters give the plan's sizes:
// arena, lower bound and Caffe-style first-fit slots, in bytes. Compare the two variants as
// medians of alternating runs: BM_MlpStepAlternating runs an unplanned and a planned model step
// by step in the same process, each first in every other pair, and reports both medians and
// their ratio (planned / unplanned) as counters:
//   build/bench/bench_step_plan --benchmark_filter=Alternating
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <vector>

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

void BM_MlpStepAlternating(benchmark::State& state) {
  MlpStep plain(state.range(0)), planned(state.range(0));
  mt::memory::StepPlan plan = mt::memory::plan_step(mt::Device::cpu(), planned);
  for (int i = 0; i < 20; ++i) {
    plain();
    plan.run(planned);
  }
  using clock = std::chrono::steady_clock;
  std::vector<double> t_plain, t_planned;
  bool plain_first = true;
  for (auto _ : state) {
    const auto t0 = clock::now();
    benchmark::DoNotOptimize(plain_first ? plain() : plan.run(planned));
    const auto t1 = clock::now();
    benchmark::DoNotOptimize(plain_first ? plan.run(planned) : plain());
    const auto t2 = clock::now();
    const double first = std::chrono::duration<double>(t1 - t0).count();
    const double second = std::chrono::duration<double>(t2 - t1).count();
    t_plain.push_back(plain_first ? first : second);
    t_planned.push_back(plain_first ? second : first);
    state.SetIterationTime(first + second);
    plain_first = !plain_first;
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  const double mp = median(t_plain), mq = median(t_planned);
  state.counters["unplanned_us"] = mp * 1e6;
  state.counters["planned_us"] = mq * 1e6;
  state.counters["planned_over_unplanned"] = mq / mp;
}

}  // namespace

BENCHMARK(BM_MlpStepAlternating)->Arg(512)->Arg(32)->Unit(benchmark::kMicrosecond)->UseManualTime()->MinTime(2.0);
BENCHMARK(BM_MlpStepUnplanned)->Arg(512)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_MlpStepPlanned)->Arg(512)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
