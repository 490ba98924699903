// Autocast dispatch overhead: time per call of small ops with autocast off, on with inputs that
// need no cast (the cost of the hook itself), and on with fp32 inputs (hook plus casts). Ops run
// under NoGradGuard so autograd recording does not hide the dispatch cost.
//   bench_autocast --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <memory>

#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;

namespace {

enum class Op { Relu, Add, Matmul };

void run(benchmark::State& state, Op op, mt::DType input_dtype, bool autocast, bool cached_weight = false) {
  const mt::Shape shape = op == Op::Matmul ? mt::Shape{8, 8} : mt::Shape{8};
  const mt::Tensor a = mt::randn(shape).to(input_dtype);
  mt::Tensor b = mt::randn(shape).to(input_dtype);
  if (cached_weight) b.set_requires_grad(true);  // an fp32 parameter: its cast comes from the cache
  mt::NoGradGuard no_grad;
  std::unique_ptr<mt::amp::AutocastGuard> guard;
  if (autocast) guard = std::make_unique<mt::amp::AutocastGuard>(mt::DeviceType::CPU, mt::kFloat16);
  for (auto _ : state) {
    mt::Tensor out;
    switch (op) {
      case Op::Relu: out = mt::relu(a); break;
      case Op::Add: out = mt::add(a, b); break;
      case Op::Matmul: out = mt::matmul(a, b); break;
    }
    benchmark::DoNotOptimize(out.raw_data());
  }
}

}  // namespace

BENCHMARK_CAPTURE(run, relu_off_fp32, Op::Relu, mt::kFloat32, false);
BENCHMARK_CAPTURE(run, relu_off_fp16, Op::Relu, mt::kFloat16, false);
BENCHMARK_CAPTURE(run, relu_on_fp16, Op::Relu, mt::kFloat16, true);
BENCHMARK_CAPTURE(run, relu_on_fp32, Op::Relu, mt::kFloat32, true);
BENCHMARK_CAPTURE(run, add_off_fp32, Op::Add, mt::kFloat32, false);
BENCHMARK_CAPTURE(run, add_off_fp16, Op::Add, mt::kFloat16, false);
BENCHMARK_CAPTURE(run, add_on_fp16, Op::Add, mt::kFloat16, true);
BENCHMARK_CAPTURE(run, add_on_fp32, Op::Add, mt::kFloat32, true);
BENCHMARK_CAPTURE(run, matmul_off_fp32, Op::Matmul, mt::kFloat32, false);
BENCHMARK_CAPTURE(run, matmul_off_fp16, Op::Matmul, mt::kFloat16, false);
BENCHMARK_CAPTURE(run, matmul_on_fp16, Op::Matmul, mt::kFloat16, true);
BENCHMARK_CAPTURE(run, matmul_on_fp32_casts, Op::Matmul, mt::kFloat32, true);
BENCHMARK_CAPTURE(run, matmul_on_fp32_cached_weight, Op::Matmul, mt::kFloat32, true, true);
