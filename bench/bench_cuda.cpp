// GPU benchmarks of the CUDA backend (skipped, with the reason, where no GPU is present):
//   Gemm/<dtype>/<n>:        mixtrain::matmul on n x n x n (dispatch, allocation, cuBLASLt)
//   CublasGemmEx/<dtype>/<n>: the same product through cublasGemmEx alone, into a preallocated
//                            output: the ceiling our dispatch is measured against
//   ScaledMm/<n>:            mixtrain::scaled_mm, e4m3 x e4m3 -> bf16 on n x n x n (cuBLASLt's fp8
//                            GEMM; the bar: >= 1.6x Gemm/bf16 at 8192, and >= 0.95x
//                            torch._scaled_mm, bench/reference/torch_scaled_mm.py)
//   DeviceCopy/<bytes>:      a device-to-device copy: the measured memory bandwidth
//   ScalerUnscaleUpdate/<n>: the GradScaler's check + unscale over n fp16 gradient elements
//                            (100 tensors, in place) plus the on-device scale update
//   Attention/<dtype>/<fused>/<shape>: scaled_dot_product_attention forward + backward, causal,
//                            head dim 64: shape 0 is B = 64 x 12 heads at L = S = 128 (the
//                            transformer benchmark's), 1 is 8 x 12 heads at 1024; fused kernels
//                            (1) against the composite (0); bench/reference/torch_attention.py
//                            times PyTorch on the same cases
// Times are GPU time from CUDA events around each iteration (UseManualTime).
#include <benchmark/benchmark.h>

#include <vector>

#include "backends/all_kernels.h"
#include "mixtrain/config.h"
#include "mixtrain/mixtrain.h"
#include "ops/attention_fused.h"

#ifdef MIXTRAIN_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace mt = mixtrain;

namespace {

cudaStream_t stream() { return static_cast<cudaStream_t>(mt::cuda::stream(0)); }

// The GPU time of body() between events on mixtrain's stream. The device is idle at the start
// event, so host time spent before the first kernel (our dispatch) counts too.
template <class Body>
void timed(benchmark::State& state, Body&& body) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (auto _ : state) {
    mt::cuda::synchronize(0);
    cudaEventRecord(start, stream());
    body();
    cudaEventRecord(stop, stream());
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

bool need_gpu(benchmark::State& state) {
  if (mt::cuda::is_available()) return true;
  state.SkipWithError("no CUDA device on this machine");
  return false;
}

mt::DType dtype_arg(int64_t i) { return i == 0 ? mt::kFloat16 : i == 1 ? mt::kBFloat16 : mt::kFloat32; }

void BM_Gemm(benchmark::State& state) {
  if (!need_gpu(state)) return;
  const mt::DType dt = dtype_arg(state.range(0));
  const int64_t n = state.range(1);
  mt::NoGradGuard no_grad;
  const mt::TensorOptions o = mt::TensorOptions(dt).device(mt::Device::cuda());
  const mt::Tensor a = mt::randn({n, n}, o), b = mt::randn({n, n}, o);
  for (int i = 0; i < 3; ++i) mt::matmul(a, b);  // plan cache and allocator warm
  timed(state, [&] { benchmark::DoNotOptimize(mt::matmul(a, b)); });
  state.counters["TFLOP/s"] = benchmark::Counter(2.0 * n * n * n * state.iterations() / 1e12, benchmark::Counter::kIsRate);
  state.SetLabel(mt::dtype_name(dt));
}

void BM_ScaledMm(benchmark::State& state) {
  if (!need_gpu(state)) return;
  const int64_t n = state.range(0);
  mt::NoGradGuard no_grad;
  const mt::TensorOptions o = mt::TensorOptions(mt::kFloat32).device(mt::Device::cuda());
  // b column-major, as torch._scaled_mm wants it (the layout cuBLASLt's fp8 GEMM takes).
  const mt::Tensor a = mt::randn({n, n}, o).to(mt::kFloat8E4M3FN), b = mt::randn({n, n}, o).to(mt::kFloat8E4M3FN).t();
  const mt::Tensor scale = mt::ones({1}, o);
  for (int i = 0; i < 3; ++i) mt::scaled_mm(a, b, scale, scale, mt::kBFloat16);
  timed(state, [&] { benchmark::DoNotOptimize(mt::scaled_mm(a, b, scale, scale, mt::kBFloat16)); });
  state.counters["TFLOP/s"] = benchmark::Counter(2.0 * n * n * n * state.iterations() / 1e12, benchmark::Counter::kIsRate);
  state.SetLabel("float8_e4m3fn -> bfloat16");
}

void BM_CublasGemmEx(benchmark::State& state) {
  if (!need_gpu(state)) return;
  const mt::DType dt = dtype_arg(state.range(0));
  const int64_t n = state.range(1);
  mt::NoGradGuard no_grad;
  const mt::TensorOptions o = mt::TensorOptions(dt).device(mt::Device::cuda());
  const mt::Tensor a = mt::randn({n, n}, o), b = mt::randn({n, n}, o), c = mt::empty({n, n}, o);
  cublasHandle_t h;
  cublasCreate(&h);
  cublasSetStream(h, stream());
  const cudaDataType_t t = dt == mt::kFloat16 ? CUDA_R_16F : dt == mt::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
  const float alpha = 1, beta = 0;
  const int ni = static_cast<int>(n);
  auto run = [&] {
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, b.raw_data(), t, ni, a.raw_data(), t, ni, &beta,
                 c.raw_data(), t, ni, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  for (int i = 0; i < 3; ++i) run();
  timed(state, run);
  cublasDestroy(h);
  state.counters["TFLOP/s"] = benchmark::Counter(2.0 * n * n * n * state.iterations() / 1e12, benchmark::Counter::kIsRate);
  state.SetLabel(mt::dtype_name(dt));
}

void BM_DeviceCopy(benchmark::State& state) {
  if (!need_gpu(state)) return;
  const int64_t bytes = state.range(0);
  const mt::TensorOptions o = mt::TensorOptions(mt::kFloat16).device(mt::Device::cuda());
  const mt::Tensor src = mt::rand({bytes / 2}, o), dst = mt::empty({bytes / 2}, o);
  timed(state, [&] { cudaMemcpyAsync(dst.raw_data(), src.raw_data(), bytes, cudaMemcpyDeviceToDevice, stream()); });
  state.SetBytesProcessed(2 * bytes * state.iterations());  // read + written
}

void BM_ScalerUnscaleUpdate(benchmark::State& state) {
  if (!need_gpu(state)) return;
  const int64_t total = state.range(0);
  constexpr int kTensors = 100;
  const mt::Device d = mt::Device::cuda();
  std::vector<mt::Tensor> grads;
  for (int i = 0; i < kTensors; ++i) grads.push_back(mt::randn({total / kTensors}, mt::TensorOptions(mt::kFloat16).device(d)));
  const mt::DeviceType backend = mt::DeviceType::CUDA;
  const mt::TensorOptions f32 = mt::TensorOptions(mt::kFloat32).device(d);
  // Alternating 1/2 and 2 keeps the values where they are over the iterations.
  const mt::Tensor inv[2] = {mt::full({}, 0.5, f32), mt::full({}, 2.0, f32)};
  const mt::Tensor found = mt::zeros({}, f32), scale = mt::full({}, 65536.0, f32), at_min = mt::zeros({}, f32);
  const mt::Tensor growth = mt::zeros({}, mt::TensorOptions(mt::kInt32).device(d));
  const mt::Tensor hyst = mt::ones({}, mt::TensorOptions(mt::kInt32).device(d));
  const mt::backends::ScaleUpdateArgs args;
  int64_t k = 0;
  timed(state, [&] {
    mt::backends::non_finite_check_and_unscale(backend, grads, grads, inv[k++ & 1], found, mt::Tensor());
    mt::backends::update_scale(backend, scale, growth, hyst, found, args, at_min);
  });
  state.SetBytesProcessed(4 * total * state.iterations());  // fp16 read + written
  if (found.item<float>() != 0.0f) state.SkipWithError("unexpected inf/NaN");
}


// range(0): 0 fp16 / 1 bf16; range(1): 1 fused / 0 composite; range(2): the shape (see the top).
void BM_Attention(benchmark::State& state) {
  if (!need_gpu(state)) return;
  const mt::DType dt = dtype_arg(state.range(0));
  const bool fused = state.range(1) != 0;
  const int64_t batch = state.range(2) == 0 ? 64 : 8, seq = state.range(2) == 0 ? 128 : 1024;
  const mt::TensorOptions o = mt::TensorOptions(dt).device(mt::Device::cuda());
  mt::Tensor q = mt::randn({batch, 12, seq, 64}, o).set_requires_grad(true);
  mt::Tensor k = mt::randn({batch, 12, seq, 64}, o).set_requires_grad(true);
  mt::Tensor v = mt::randn({batch, 12, seq, 64}, o).set_requires_grad(true);
  const mt::Tensor go = mt::randn({batch, 12, seq, 64}, o);
  auto step = [&] {
    mt::Tensor out = mixtrain::nn::functional::scaled_dot_product_attention(q, k, v, mt::Tensor(), 0.0, true);
    out.backward(go);
  };
  mt::ops::set_attention_path(fused ? mt::ops::AttentionPath::Fused : mt::ops::AttentionPath::Composite);
  for (int i = 0; i < 3; ++i) step();  // allocator warm
  timed(state, [&] {
    for (mt::Tensor* t : {&q, &k, &v}) t->set_grad(mt::Tensor());  // fresh gradients, no accumulation
    step();
  });
  mt::ops::set_attention_path(mt::ops::AttentionPath::Measured);
  state.SetLabel(std::string(fused ? "fused " : "composite ") + mt::dtype_name(dt) + " B=" + std::to_string(batch) +
                 "x12 L=S=" + std::to_string(seq) + " E=64 causal");
}
}  // namespace

BENCHMARK(BM_Gemm)->ArgsProduct({{0, 1, 2}, {4096, 8192}})->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_ScaledMm)->Arg(4096)->Arg(8192)->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_CublasGemmEx)->ArgsProduct({{0, 1, 2}, {4096, 8192}})->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_DeviceCopy)->Arg(int64_t{400} << 20)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ScalerUnscaleUpdate)->Arg(100'000'000)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Attention)->ArgsProduct({{0, 1}, {1, 0}, {0, 1}})->UseManualTime()->Unit(benchmark::kMillisecond);

#else
static void BM_NoCuda(benchmark::State& state) {
  for (auto _ : state) {
  }
  state.SkipWithError("mixtrain was built without CUDA");
}
BENCHMARK(BM_NoCuda);
#endif
