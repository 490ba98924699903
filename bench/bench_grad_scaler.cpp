// The GradScaler's fused non-finite check + unscale pass on the CPU backend
// (backends::non_finite_check_and_unscale), over 10M and 100M gradient elements split
// into 8 tensors, as one optimizer's gradients would be:
//   fp32:      fp32 grads unscaled in place             (read 4 + write 4 bytes per element)
//   fp16->fp32: fp16 grads read, fp32 master grads written (read 2 + write 4 bytes per element)
//   fp32+stats: as fp32, gathering the gradient health statistics in the same pass
// Throughput is bytes read + written per second (SetBytesProcessed).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "backends/all_kernels.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;

namespace {

constexpr int kTensors = 8;

struct Grads {
  std::vector<mt::Tensor> in, out;
};

Grads make(int64_t total, mt::DType in_dtype, bool master) {
  Grads g;
  mt::Generator gen(1);
  const int64_t each = total / kTensors;
  for (int i = 0; i < kTensors; ++i) {
    // Random finite values; a fresh tensor per slot so the pass streams through memory.
    mt::Tensor t = (mt::rand({each}, gen) * 200.0 - 100.0).to(in_dtype);
    g.in.push_back(t);
    g.out.push_back(master ? mt::empty({each}, mt::kFloat32) : t);
  }
  return g;
}

void run(benchmark::State& state, mt::DType in_dtype, bool master, bool stats) {
  const int64_t total = state.range(0);
  Grads g = make(total, in_dtype, master);
  // Powers of two, as dynamic scaling uses. The in-place variants alternate 1/65536 and 65536 so
  // the values do not drift into subnormals (slow on x86) or zeros over the iterations.
  const mt::Tensor inv[2] = {mt::full({}, 1.0 / 65536.0), mt::full({}, master ? 1.0 / 65536.0 : 65536.0)};
  const mt::Tensor found = mt::zeros({});
  const mt::Tensor st = stats ? mt::zeros({mt::backends::kAmpStatsSize}, mt::kFloat64) : mt::Tensor();
  const mt::DeviceType backend = mt::DeviceType::CPU;
  int64_t k = 0;
  for (auto _ : state) {
    mt::backends::non_finite_check_and_unscale(backend, g.in, g.out, inv[k++ & 1], found, st);
    benchmark::ClobberMemory();
  }
  const int64_t per_element = static_cast<int64_t>(mt::element_size(in_dtype)) + (master ? 4 : static_cast<int64_t>(mt::element_size(in_dtype)));
  state.SetBytesProcessed(state.iterations() * total * per_element);
  state.SetItemsProcessed(state.iterations() * total);
  if (found.item<float>() != 0.0f) state.SkipWithError("unexpected inf/NaN");
}

void BM_UnscaleCheck_fp32(benchmark::State& s) { run(s, mt::kFloat32, false, false); }
void BM_UnscaleCheck_fp16_to_fp32(benchmark::State& s) { run(s, mt::kFloat16, true, false); }
void BM_UnscaleCheck_fp32_stats(benchmark::State& s) { run(s, mt::kFloat32, false, true); }

}  // namespace

BENCHMARK(BM_UnscaleCheck_fp32)->Arg(10'000'000)->Arg(100'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_UnscaleCheck_fp16_to_fp32)->Arg(10'000'000)->Arg(100'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_UnscaleCheck_fp32_stats)->Arg(10'000'000)->Arg(100'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
