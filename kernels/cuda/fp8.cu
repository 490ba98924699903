// The fp8 family's device code (backends/fp8.h): the scaled cast with its amax and saturation
// count in the same pass, and the recipes' scale update. The arithmetic is the CPU's, written once:
// base/float8.h's encoders and backends/fp8_math.h's scale rule.
#include "kernels/cuda/fp8.h"
#include "backends/fp8_math.h"
#include "common.cuh"

namespace mixtrain::kernels {

namespace {

// amax >= 0 always, and non-negative floats order as their bit patterns: an integer max is the
// float max, and max is order-independent, so the result does not depend on the schedule.
__device__ __forceinline__ void atomic_max_nonnegative(float* address, float v) {
  atomicMax(reinterpret_cast<int*>(address), __float_as_int(v));
}

template <class In, class F8, bool kScale, bool kStats>
__global__ void cast_to_fp8_kernel(const In* __restrict__ src, uint8_t* __restrict__ dst, int64_t n,
                                   const float* __restrict__ scale, bool saturate, float* amax, int64_t* saturated) {
  const float s = kScale ? *scale : 1.0f;
  float local_amax = 0.0f;
  int64_t local_count = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = convert<float>(src[i]);  // a negative fp16 NaN stays negative (common.cuh)
    const float v = kScale ? __fmul_rn(x, s) : x;  // as the CPU: one fp32 product, no contraction
    if (dst) dst[i] = Float8Traits<F8>::encode(v, saturate);
    if constexpr (kStats) {
      const float ax = fabsf(x);
      local_amax = ax > local_amax ? ax : local_amax;  // a NaN compares false: ignored
      local_count += fabsf(v) > Float8Traits<F8>::kMax;
    }
  }
  if constexpr (kStats) {
    __shared__ float max_shared[32];
    __shared__ int64_t count_shared[32];
    local_amax = block_reduce(local_amax, MaxOp{}, max_shared);
    local_count = block_reduce(local_count, SumOp{}, count_shared);
    if (threadIdx.x == 0) {
      if (amax) atomic_max_nonnegative(amax, local_amax);
      if (saturated && local_count > 0)
        atomicAdd(reinterpret_cast<unsigned long long*>(saturated), static_cast<unsigned long long>(local_count));
    }
  }
}

template <class In, class F8>
void launch_cast(const void* src, void* dst, int64_t n, const float* scale, bool saturate, float* amax,
                 int64_t* saturated, cudaStream_t stream) {
  const int64_t blocks = blocks_for(n, kThreads * 4);
  const auto* in = static_cast<const In*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  const bool stats = amax || saturated;
  if (scale && stats)
    cast_to_fp8_kernel<In, F8, true, true><<<blocks, kThreads, 0, stream>>>(in, out, n, scale, saturate, amax, saturated);
  else if (scale)
    cast_to_fp8_kernel<In, F8, true, false><<<blocks, kThreads, 0, stream>>>(in, out, n, scale, saturate, amax, saturated);
  else if (stats)
    cast_to_fp8_kernel<In, F8, false, true><<<blocks, kThreads, 0, stream>>>(in, out, n, scale, saturate, amax, saturated);
  else
    cast_to_fp8_kernel<In, F8, false, false><<<blocks, kThreads, 0, stream>>>(in, out, n, scale, saturate, amax, saturated);
}

// One thread per slot: the max over its column of the history, the scale rule, the roll.
__global__ void fp8_update_scale_kernel(float* history, int64_t rows, int64_t k, float* scale, float* scale_inv,
                                        backends::Fp8ScaleArgs args) {
  const int64_t j = threadIdx.x;
  if (j >= k) return;
  float a = history[j];
  if (args.max_over_history)
    for (int64_t r = 1; r < rows; ++r) a = fmaxf(a, history[r * k + j]);
  const backends::Fp8ScaleDecision d =
      backends::fp8_scale_decision(a, scale[j], args.fp8_max[j], args.margin, args.keep_scale_on_zero);
  scale[j] = d.scale;
  scale_inv[j] = d.scale_inv;
  if (args.roll) {
    for (int64_t r = rows - 1; r > 0; --r) history[r * k + j] = history[(r - 1) * k + j];
    history[j] = 0.0f;
  }
}

}  // namespace

void cast_to_fp8(DType src_dtype, const void* src, void* dst, int64_t n, DType fp8, const float* scale, bool saturate,
                 float* amax, int64_t* saturated, cudaStream_t stream) {
  if (n == 0) return;
  MT_CHECK(is_float8(fp8), "cast_to_fp8: ", fp8, " is not an fp8 dtype");
  dispatch_floating(src_dtype, "cast_to_fp8", [&](auto tag) {
    using In = typename decltype(tag)::type;
    if constexpr (std::is_same_v<In, double>) {
      MT_ERROR("cast_to_fp8: a float64 source is not supported (cast it to float32 first)");
    } else if (fp8 == kFloat8E4M3FN) {
      launch_cast<In, Float8E4M3FN>(src, dst, n, scale, saturate, amax, saturated, stream);
    } else {
      launch_cast<In, Float8E5M2>(src, dst, n, scale, saturate, amax, saturated, stream);
    }
  });
  check_launch("cast_to_fp8");
}

void fp8_update_scale(float* history, int64_t rows, int64_t k, float* scale, float* scale_inv,
                      const backends::Fp8ScaleArgs& args, cudaStream_t stream) {
  MT_CHECK(k >= 1 && k <= backends::Fp8ScaleArgs::kMaxSlots, "fp8_update_scale: ", k, " slots (at most ",
           backends::Fp8ScaleArgs::kMaxSlots, ")");
  fp8_update_scale_kernel<<<1, 32, 0, stream>>>(history, rows, k, scale, scale_inv, args);
  check_launch("fp8_update_scale");
}

}  // namespace mixtrain::kernels
