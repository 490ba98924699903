#pragma once
// The fp8 family's launchers (fp8.cu), called by backends/cuda/fp8.cpp;
// what every launcher takes and does: launch_args.h.
#include "kernels/cuda/launch_args.h"

namespace mixtrain::kernels {

// The kernels of backends/fp8.h. src: n contiguous elements of `src_dtype` (fp32, fp16, bf16);
// dst: n bytes of `fp8` or null (statistics only); scale: one device float or null. amax (one
// device float, >= 0) becomes max(amax, max |src|), NaN ignored; saturated (one device int64)
// grows by the count of |src * scale| > max; either may be null.
void cast_to_fp8(DType src_dtype, const void* src, void* dst, int64_t n, DType fp8, const float* scale, bool saturate,
                 float* amax, int64_t* saturated, cudaStream_t stream);
// history [rows, k], scale [k], scale_inv [k] (k <= Fp8ScaleArgs::kMaxSlots), updated in place.
void fp8_update_scale(float* history, int64_t rows, int64_t k, float* scale, float* scale_inv,
                      const backends::Fp8ScaleArgs& args, cudaStream_t stream);

}  // namespace mixtrain::kernels
