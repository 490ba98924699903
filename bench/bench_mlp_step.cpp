// One fp32 training step on the CPU (forward, MSE loss, backward, Adam) of the dense MLP
// 215-1000-500-1 with ReLU: the model of the AMP benchmark's tabular network, at batch 512 and 32.
// bench/reference/torch_mlp_step.py is the same step in PyTorch. Run with
//   build/bench/bench_mlp_step --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;

namespace {

void BM_MlpStep(benchmark::State& state) {
  const int64_t batch = state.range(0);
  mt::manual_seed(0);
  mt::nn::Sequential model(mt::nn::Linear(215, 1000), mt::nn::ReLU(), mt::nn::Linear(1000, 500), mt::nn::ReLU(),
                           mt::nn::Linear(500, 1));
  mt::optim::Adam opt(model->parameters(), mt::optim::AdamOptions().lr(1e-3));
  const mt::Tensor x = mt::randn({batch, 215}), y = mt::randn({batch, 1});
  auto step = [&] {
    opt.zero_grad();
    mt::Tensor loss = mt::nn::functional::mse_loss(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  for (int i = 0; i < 20; ++i) step();
  for (auto _ : state) benchmark::DoNotOptimize(step());
  state.SetItemsProcessed(state.iterations() * batch);
}

}  // namespace

BENCHMARK(BM_MlpStep)->Arg(512)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();
