// The CPU backend's GEMM and convolution kernels on oneDNN against its own (Eigen, the vdpbf16ps
// kernel, im2col + GEMM), fp32 and bf16, called as the ops call them (backends::gemm, conv2d and
// its two backward kernels) with MIXTRAIN_ONEDNN's modes forced: `onednn` is mode all, `own` mode
// 0. Shapes: a sweep of square GEMMs (where the size thresholds of cpu/onednn/onednn.h come from),
// the MLP 215-1000-500-1 step's three products per layer at batch 512, the `--size small`
// transformer's (2048 tokens, width 256, FFN 1024) and the UNet's 3x3 convolutions at
// `--size small` (width 16, 64x64 images, batch 8) and `--size tiny`. bench/onednn_check.sh runs
// it with interleaved repetitions:
//   bench_cpu_onednn --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true \
//     --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <string>

#include "backends/all_kernels.h"
#include "backends/cpu/onednn/onednn.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
namespace cpu = mixtrain::backends::cpu;

namespace {

enum class Engine { OneDnn, Own };

bool use(benchmark::State& state, Engine engine) {
  if (engine == Engine::OneDnn && !cpu::onednn_built()) {
    state.SkipWithError("this mixtrain is built without oneDNN");
    return false;
  }
  cpu::set_onednn_override(static_cast<int>(engine == Engine::OneDnn ? cpu::OneDnnMode::All : cpu::OneDnnMode::Off));
  return true;
}

void flops(benchmark::State& state, double per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// C[m, n] = A[m, k] op(B): trans_b reads B stored [n, k] (linear's weight), as the forward does.
void gemm(benchmark::State& state, Engine engine, mt::DType dt) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const bool trans_a = state.range(3) & 1, trans_b = state.range(3) & 2;
  if (!use(state, engine)) return;
  const mt::Tensor a = mt::randn(trans_a ? mt::Shape{k, m} : mt::Shape{m, k}).to(dt);
  const mt::Tensor b = mt::randn(trans_b ? mt::Shape{n, k} : mt::Shape{k, n}).to(dt);
  mt::Tensor out = mt::empty({m, n}, mt::TensorOptions(dt));
  for (auto _ : state) {
    mt::backends::gemm(mt::DeviceType::CPU, a, trans_a, b, trans_b, out, mt::Tensor(), mt::backends::GemmEpilogue::None);
    benchmark::DoNotOptimize(out.raw_data());
  }
  cpu::set_onednn_override(-1);
  flops(state, 2.0 * double(m) * double(n) * double(k));
}

void square_sweep(benchmark::internal::Benchmark* b) {
  for (int64_t s : {8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048}) b->Args({s, s, s, 2});
  b->Unit(benchmark::kMicrosecond);
}

void model_shapes(benchmark::internal::Benchmark* b) {
  // MLP 215-1000-500-1, batch 512: forward x W^T, input gradient dY W, weight gradient dY^T x.
  const int64_t widths[] = {215, 1000, 500, 1};
  for (int l = 0; l < 3; ++l) {
    const int64_t in = widths[l], out = widths[l + 1];
    b->Args({512, out, in, 2});
    if (l > 0) b->Args({512, in, out, 0});
    b->Args({out, in, 512, 1});
  }
  // Transformer --size small: 16 x 128 tokens, width 256: qkv, FFN up, FFN down, a weight gradient.
  b->Args({2048, 768, 256, 2});
  b->Args({2048, 1024, 256, 2});
  b->Args({2048, 256, 1024, 2});
  b->Args({1024, 256, 2048, 1});
  b->Unit(benchmark::kMicrosecond);
}

enum class ConvKernel { Forward, BackwardInput, BackwardWeight };

// A 3x3 convolution, padding 1, of `c` channels to `c` on an n x c x hw x hw batch.
void conv(benchmark::State& state, Engine engine, mt::DType dt, ConvKernel kernel) {
  const int64_t n = state.range(0), c = state.range(1), hw = state.range(2);
  if (!use(state, engine)) return;
  mt::backends::Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  const mt::Tensor x = mt::randn({n, c, hw, hw}).to(dt), w = mt::randn({c, c, 3, 3}).to(dt);
  const mt::Tensor y = mt::randn({n, c, hw, hw}).to(dt);
  mt::Tensor out = mt::empty(kernel == ConvKernel::BackwardWeight ? w.shape() : x.shape(), mt::TensorOptions(dt));
  for (auto _ : state) {
    if (kernel == ConvKernel::Forward) mt::backends::conv2d(mt::DeviceType::CPU, x, w, mt::Tensor(), p, out);
    else if (kernel == ConvKernel::BackwardInput) mt::backends::conv2d_backward_input(mt::DeviceType::CPU, y, w, p, out);
    else mt::backends::conv2d_backward_weight(mt::DeviceType::CPU, y, x, p, out);
    benchmark::DoNotOptimize(out.raw_data());
  }
  cpu::set_onednn_override(-1);
  flops(state, 2.0 * double(n) * double(c) * double(c) * 9.0 * double(hw) * double(hw));
}

void unet_shapes(benchmark::internal::Benchmark* b) {
  // --size small (batch 8, width 16, 64x64): the four levels' channels and sizes.
  b->Args({8, 16, 64})->Args({8, 32, 32})->Args({8, 64, 16})->Args({8, 128, 8});
  // --size tiny (batch 4, width 8, 32x32).
  b->Args({4, 8, 32})->Args({4, 16, 16})->Args({4, 32, 8})->Args({4, 64, 4});
  b->Unit(benchmark::kMicrosecond);
}

}  // namespace

#define MT_GEMM_BENCH(engine, dtname, dt)                                                                     \
  BENCHMARK_CAPTURE(gemm, square_##engine##_##dtname, Engine::engine, dt)->Apply(square_sweep);            \
  BENCHMARK_CAPTURE(gemm, model_##engine##_##dtname, Engine::engine, dt)->Apply(model_shapes);
MT_GEMM_BENCH(OneDnn, fp32, mt::kFloat32)
MT_GEMM_BENCH(Own, fp32, mt::kFloat32)
MT_GEMM_BENCH(OneDnn, bf16, mt::kBFloat16)
MT_GEMM_BENCH(Own, bf16, mt::kBFloat16)

#define MT_CONV_BENCH(engine, dtname, dt, kernel) \
  BENCHMARK_CAPTURE(conv, kernel##_##engine##_##dtname, Engine::engine, dt, ConvKernel::kernel)->Apply(unet_shapes);
#define MT_CONV_BENCHES(kernel)                         \
  MT_CONV_BENCH(OneDnn, fp32, mt::kFloat32, kernel)     \
  MT_CONV_BENCH(Own, fp32, mt::kFloat32, kernel)        \
  MT_CONV_BENCH(OneDnn, bf16, mt::kBFloat16, kernel)    \
  MT_CONV_BENCH(Own, bf16, mt::kBFloat16, kernel)
MT_CONV_BENCHES(Forward)
MT_CONV_BENCHES(BackwardInput)
MT_CONV_BENCHES(BackwardWeight)
