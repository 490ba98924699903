#pragma once
// The fp8 family's kernels (ops/fp8.cpp: to_float8, scaled_mm, fp8_linear; amp's FP8 recipes):
// scaled casts to the fp8 formats with the amax and saturation count in the same pass, the scale
// update of the recipes, and the scaled matrix product. Numerics are written once in
// base/float8.h (the encoders) and kernel_types.h (Fp8ScaleArgs), so the backends agree.
#include "backends/kernel.h"
#include "backends/kernel_types.h"

namespace mixtrain::backends {

// dst = fp8(src * scale): dst of dtype `fp8` (src's shape, contiguous), or undefined for the
// statistics alone; src contiguous fp32, fp16 or bf16. scale: undefined (none) or a 0-dim or
// 1-element fp32 tensor (a view into a state vector will do). saturate: clamp to +-max first (e5m2;
// e4m3fn always saturates). In the same pass, when given: amax (1-element fp32) becomes
// max(amax, max |src|), NaN ignored; saturated (1-element int64) += the count of |src * scale| >
// max, inf included, NaN not. Both accumulate, never reset (the caller zeroes them).
MT_KERNEL(fp8, cast_to_fp8,
          void(const Tensor& src, const Tensor& dst, DType fp8, const Tensor& scale, bool saturate, const Tensor& amax,
               const Tensor& saturated));
// amax_history: fp32 [rows, k] contiguous (k <= Fp8ScaleArgs::kMaxSlots); scale, scale_inv: fp32
// [k] contiguous, updated in place as Fp8ScaleArgs says.
MT_KERNEL(fp8, fp8_update_scale,
          void(const Tensor& amax_history, const Tensor& scale, const Tensor& scale_inv, const Fp8ScaleArgs& args));
// out = (a @ b) * scale_a * scale_b (+ bias): a [m, k] and b [k, n] fp8 (each e4m3fn or e5m2; CUDA
// has no e5m2 x e5m2), a unit stride in one of each one's last two dims; scale_a, scale_b
// 1-element fp32 (the inverse scales: data / scale is the value); exact products, fp32 sums, the
// scales and the bias applied to the fp32 sum, one rounding into out (contiguous [m, n], fp32,
// bf16 or fp16). bias: undefined or [n], bf16 or fp16 (ops/fp8.cpp checks PyTorch's pairing).
MT_KERNEL(fp8, scaled_mm,
          void(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b, const Tensor& bias,
               const Tensor& out));

}  // namespace mixtrain::backends
