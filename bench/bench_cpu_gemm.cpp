// CPU matrix products: fp32 (Eigen), bf16 on the vdpbf16ps kernel and bf16 on the fp32 path
// (widen, Eigen, round), at 512^3 and at the shapes of the tiny transformer (256 tokens, width
// 64, FFN 256) and of a UNet 3x3 convolution as im2col GEMM. Run with interleaved repetitions so
// that load on a shared machine hits every variant alike:
//   bench_cpu_gemm --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true \
//     --benchmark_report_aggregates_only=true
// bf16_new is skipped (with a message) where the kernel is off (gemm_bf16.h).
// mlp_fp32 times the fp32 GEMMs of the MLP 215-1000-500-1 step in the layouts the step uses
// (forward x W^T, input gradient dY W, weight gradient dY^T x) at batch 512 and 32; compare its
// GFLOP/s with the cores' FMA peak (docs/CPU.md, "fp32 GEMMs against the FMA peak").
#include <benchmark/benchmark.h>

#include <string>

#include "kernels/cpu/gemm_bf16.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
namespace cpu = mixtrain::backends::cpu;

namespace {

enum class Path { Fp32, Bf16New, Bf16Old };

void run(benchmark::State& state, Path path) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  if (path == Path::Bf16New && !cpu::bf16_gemm_enabled()) {
    state.SkipWithError("the bf16 kernel is off on this CPU/build");
    return;
  }
  const mt::DType dt = path == Path::Fp32 ? mt::kFloat32 : mt::kBFloat16;
  const mt::Tensor a = mt::randn({m, k}).to(dt), b = mt::randn({k, n}).to(dt);
  mt::NoGradGuard no_grad;
  cpu::set_bf16_gemm_override(path == Path::Bf16Old ? 0 : -1);
  for (auto _ : state) {
    mt::Tensor out = mt::matmul(a, b);
    benchmark::DoNotOptimize(out.raw_data());
  }
  cpu::set_bf16_gemm_override(-1);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(m) * double(n) * double(k), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({512, 512, 512});  // the square
  b->Args({256, 192, 64});   // transformer tiny: qkv projection
  b->Args({256, 256, 64});   // FFN up, vocab head
  b->Args({256, 64, 256});   // FFN down
  b->Args({64, 1024, 576});  // UNet: 64 channels out of 64 in, 3x3, 32x32 image
  b->Args({1024, 576, 64});  // its weight gradient's shape class (go x cols^T transposed)
  b->Unit(benchmark::kMicrosecond);
}

// The MLP's layers and the three products of each in a training step.
constexpr int64_t kMlpWidths[] = {215, 1000, 500, 1};
enum class MlpGemm { Forward, InputGrad, WeightGrad };

void mlp_fp32(benchmark::State& state) {
  const int64_t batch = state.range(0), layer = state.range(1);
  const auto which = static_cast<MlpGemm>(state.range(2));
  const int64_t in = kMlpWidths[layer], out = kMlpWidths[layer + 1];
  const mt::Tensor x = mt::randn({batch, in}), w = mt::randn({out, in}), dy = mt::randn({batch, out});
  mt::NoGradGuard no_grad;
  const char* names[] = {"forward", "dx", "dw"};
  state.SetLabel(std::string(names[state.range(2)]) + " " + std::to_string(in) + "->" + std::to_string(out));
  for (auto _ : state) {
    mt::Tensor r = which == MlpGemm::Forward     ? mt::matmul(x, w.t())
                   : which == MlpGemm::InputGrad ? mt::matmul(dy, w)
                                                 : mt::matmul(dy.t(), x);
    benchmark::DoNotOptimize(r.raw_data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(batch) * double(in) * double(out), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

void mlp_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t batch : {512, 32})
    for (int64_t layer : {0, 1})
      for (int64_t which : {0, 1, 2}) b->Args({batch, layer, which});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();  // the threads' time, not the caller's
}

}  // namespace

BENCHMARK(mlp_fp32)->Apply(mlp_shapes);
BENCHMARK_CAPTURE(run, fp32, Path::Fp32)->Apply(shapes);
BENCHMARK_CAPTURE(run, bf16_new, Path::Bf16New)->Apply(shapes);
BENCHMARK_CAPTURE(run, bf16_old, Path::Bf16Old)->Apply(shapes);
