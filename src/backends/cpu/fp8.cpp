// The fp8 family on the CPU (backends/fp8.h): scaled casts with their statistics on the bulk
// converters (fp8_convert.h), the recipes' scale update, and scaled_mm as an exact emulation of
// the GPU's fp8 GEMM. oneDNN 2.6 has no fp8 matmul, so the operands are decoded to bf16 (every
// e4m3fn and e5m2 value is a bf16 value, and a product of two of them is exact in fp32) and
// multiplied by the backend's bf16 product (vdpbf16ps where the CPU has it, else widened to
// fp32), which sums in fp32; the scales and the bias are applied to the fp32 sum, which is
// rounded once into the output.
#include <algorithm>
#include <cmath>
#include <mutex>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/fp8_convert.h"
#include "kernels/cpu/gemm_bf16.h"
#include "backends/cpu/loops.h"
#include "backends/fp8.h"
#include "backends/fp8_math.h"
#include "mixtrain/base/grad_mode.h"

namespace mixtrain::backends::cpu {

namespace {

void cast_to_fp8(const Tensor& src, const Tensor& dst, DType fp8, const Tensor& scale, bool saturate,
                 const Tensor& amax, const Tensor& saturated) {
  MT_CHECK(src.is_contiguous() && (!dst.defined() || (dst.is_contiguous() && dst.dtype() == fp8)),
           "cast_to_fp8: expected contiguous operands, got ", src.summary(), " -> ",
           dst.defined() ? dst.summary() : std::string("(statistics only)"));
  const int64_t n = src.numel();
  const float* s = scale.defined() ? scale.data_ptr<float>() : nullptr;
  uint8_t* out = dst.defined() ? static_cast<uint8_t*>(dst.raw_data()) : nullptr;
  const bool stats = amax.defined() || saturated.defined();
  Fp8CastStats total;
  std::mutex mutex;
  auto run = [&](const auto* in) {
    parallel_for(n, kParallelGrain, [&](int64_t b, int64_t e) {
      const Fp8CastStats part = to_fp8_array(in + b, out ? out + b : nullptr, e - b, fp8, s, saturate, stats);
      if (!stats) return;
      // Max and an integer sum: the merge order does not change the result.
      std::lock_guard<std::mutex> lock(mutex);
      total.amax = std::max(total.amax, part.amax);
      total.saturated += part.saturated;
    });
  };
  switch (src.dtype()) {
    case DType::Float32: run(src.data_ptr<float>()); break;
    case DType::Float16: run(src.data_ptr<Half>()); break;
    case DType::BFloat16: run(src.data_ptr<BFloat16>()); break;
    default: MT_ERROR("cast_to_fp8: expected a float32, float16 or bfloat16 source, got ", src.summary());
  }
  if (amax.defined()) {
    float* a = amax.data_ptr<float>();
    *a = std::max(*a, total.amax);
  }
  if (saturated.defined()) *saturated.data_ptr<int64_t>() += total.saturated;
}

void fp8_update_scale(const Tensor& history, const Tensor& scale, const Tensor& scale_inv, const Fp8ScaleArgs& args) {
  const int64_t rows = history.size(0), k = history.size(1);
  MT_CHECK(k <= Fp8ScaleArgs::kMaxSlots && scale.numel() == k && scale_inv.numel() == k,
           "fp8_update_scale: history ", history.summary(), " does not match scale ", scale.summary());
  float* h = history.data_ptr<float>();
  float* s = scale.data_ptr<float>();
  float* si = scale_inv.data_ptr<float>();
  for (int64_t j = 0; j < k; ++j) {
    float a = h[j];
    if (args.max_over_history)
      for (int64_t r = 1; r < rows; ++r) a = std::max(a, h[r * k + j]);
    const Fp8ScaleDecision d = fp8_scale_decision(a, s[j], args.fp8_max[j], args.margin, args.keep_scale_on_zero);
    s[j] = d.scale;
    si[j] = d.scale_inv;
    if (args.roll) {
      for (int64_t r = rows - 1; r > 0; --r) h[r * k + j] = h[(r - 1) * k + j];
      h[j] = 0.0f;
    }
  }
}

// t's values as `to` (bf16 or fp32), unit-strided as the GEMM wants: a transposed view when t is
// one (a backward's g^T), else contiguous.
Tensor decoded(const Tensor& t, DType to) {
  NoGradGuard no_grad;
  Tensor src = t, tt = t.transpose(0, 1);
  const bool transposed = !t.is_contiguous() && tt.is_contiguous();
  if (transposed) src = tt;
  if (!src.is_contiguous()) {
    src = Tensor::empty(t.shape(), t.options());
    backends::copy(DeviceType::CPU, t, src);
  }
  Tensor out = Tensor::empty(src.shape(), TensorOptions(to));
  backends::copy(DeviceType::CPU, src, out);  // the table lookups of fp8_convert.h, split over threads
  return transposed ? out.transpose(0, 1) : out;
}

template <class S>
GemmMatrix<S> matrix(const Tensor& t) {
  return {static_cast<const S*>(t.raw_data()), t.size(0), t.size(1), t.stride(0), t.stride(1)};
}

void scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b, const Tensor& bias,
               const Tensor& out) {
  const int64_t m = a.size(0), n = b.size(1);
  MT_CHECK(out.is_contiguous() && out.size(0) == m && out.size(1) == n, "scaled_mm: output ", out.summary(),
           " must be a contiguous [", m, ", ", n, "]");
  NoGradGuard no_grad;
  const bool into_out = out.dtype() == kFloat32;
  Tensor acc = into_out ? out : Tensor::empty({m, n}, TensorOptions(kFloat32));
  float* acc_p = acc.data_ptr<float>();
  if (a.size(1) == 0) {
    std::fill(acc_p, acc_p + m * n, 0.0f);
  } else if (bf16_gemm_enabled()) {
    const Tensor a16 = decoded(a, kBFloat16), b16 = decoded(b, kBFloat16);
    gemm_bf16_product(GemmBf16Call<uint16_t>{matrix<uint16_t>(a16), matrix<uint16_t>(b16), acc_p, n, false});
  } else {
    const Tensor a32 = decoded(a, kFloat32), b32 = decoded(b, kFloat32);
    gemm_product(GemmCall<float>{matrix<float>(a32), matrix<float>(b32), acc_p, n, false});
  }
  const float s = *scale_a.data_ptr<float>() * *scale_b.data_ptr<float>();
  Tensor bias32;
  if (bias.defined()) {
    bias32 = Tensor::empty({n}, TensorOptions(kFloat32));
    backends::copy(DeviceType::CPU, bias, bias32);
  }
  const float* bp = bias32.defined() ? bias32.data_ptr<float>() : nullptr;
  parallel_for(m, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* row = acc_p + r * n;
      for (int64_t j = 0; j < n; ++j) row[j] = bp ? row[j] * s + bp[j] : row[j] * s;
    }
  });
  if (!into_out) backends::copy(DeviceType::CPU, acc, out);  // one rounding into bf16 / fp16
}

}  // namespace

void register_fp8() {
  backends::cast_to_fp8.set(DeviceType::CPU, cast_to_fp8);
  backends::fp8_update_scale.set(DeviceType::CPU, fp8_update_scale);
  backends::scaled_mm.set(DeviceType::CPU, scaled_mm);
}

}  // namespace mixtrain::backends::cpu
