// scaled_dot_product_attention forward + backward on the CPU at batch 1, 4 heads, head dim 64:
// the fused kernels against the composite (the same call under ops::set_attention_path(Fused)
// and (Composite)), fp32 and bf16, causal and not, and fp32 with dropout 0.1 (fused since the kernels apply
// it; the composite then runs dropout() on the probabilities). Counters:
// peak_extra_MiB, the allocator's peak above what was live before the step (inputs excluded;
// fp32 copies the fused kernel makes of bf16 operands included). Run with
//   build/bench/bench_attention --benchmark_repetitions=7 --benchmark_enable_random_interleaving=true \
//     --benchmark_report_aggregates_only=true
// (interleaved repetitions alternate fused and composite runs; compare the medians).
#include <benchmark/benchmark.h>

#include "mixtrain/mixtrain.h"
#include "ops/attention_fused.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;

namespace {

// range(0): sequence; range(1): 1 fused / 0 composite; range(2): 1 bf16 / 0 fp32; range(3): causal;
// range(4): dropout probability in thousandths.
void BM_AttentionFwdBwd(benchmark::State& state) {
  const int64_t seq = state.range(0);
  const bool fused = state.range(1) != 0, causal = state.range(3) != 0;
  const double dropout = static_cast<double>(state.range(4)) / 1000.0;
  const mt::DType dt = state.range(2) != 0 ? mt::kBFloat16 : mt::kFloat32;
  mt::manual_seed(0);
  mt::Tensor q = mt::randn({1, 4, seq, 64}).to(dt).set_requires_grad(true);
  mt::Tensor k = mt::randn({1, 4, seq, 64}).to(dt).set_requires_grad(true);
  mt::Tensor v = mt::randn({1, 4, seq, 64}).to(dt).set_requires_grad(true);
  const mt::Tensor go = mt::randn({1, 4, seq, 64}).to(dt);
  auto step = [&] {
    mt::ops::set_attention_path(fused ? mt::ops::AttentionPath::Fused : mt::ops::AttentionPath::Composite);
    mt::Tensor out = F::scaled_dot_product_attention(q, k, v, mt::Tensor(), dropout, causal);
    out.backward(go);
    for (mt::Tensor* t : {&q, &k, &v}) t->set_grad(mt::Tensor());
  };
  for (int i = 0; i < 2; ++i) step();
  const mt::Device cpu{};
  const int64_t before = mt::memory::stats(cpu).allocated_bytes;
  mt::memory::reset_peak_stats(cpu);
  step();
  const int64_t peak = mt::memory::stats(cpu).peak_allocated_bytes - before;
  for (auto _ : state) step();
  mt::ops::set_attention_path(mt::ops::AttentionPath::Measured);
  state.counters["peak_extra_MiB"] = static_cast<double>(peak) / (1 << 20);
  state.SetLabel(std::string(fused ? "fused " : "composite ") + mt::dtype_name(dt) + (causal ? " causal" : "") +
                 (dropout > 0 ? " dropout " + std::to_string(dropout) : ""));
}

}  // namespace

BENCHMARK(BM_AttentionFwdBwd)
    ->ArgsProduct({{1024}, {1, 0}, {0, 1}, {0, 1}, {0}})
    ->Args({1024, 1, 0, 0, 100})
    ->Args({1024, 0, 0, 0, 100})
    ->Args({256, 1, 0, 0, 0})
    ->Args({256, 0, 0, 0, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
