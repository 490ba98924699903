#pragma once
// The scale rule of the FP8 recipes (Fp8ScaleArgs in kernel_types.h), written once for the CPU
// kernel and the CUDA one: scale = (fp8_max / max(amax, 1e-12)) / 2^margin in fp32 and its
// inverse, or the previous scale where the rule keeps it.
#include "mixtrain/base/host_device.h"

namespace mixtrain::backends {

struct Fp8ScaleDecision {
  float scale, scale_inv;
};

constexpr float kFp8AmaxFloor = 1e-12f;  // torchao's: no scale beyond fp8_max * 1e12

MT_HOST_DEVICE inline Fp8ScaleDecision fp8_scale_decision(float amax, float previous, float fp8_max, int margin,
                                                          bool keep_scale_on_zero) {
  const bool finite = amax <= 3.40282347e38f;  // false for inf (and NaN, which the amax never holds)
  float scale;
  if (!finite) {
    scale = keep_scale_on_zero ? previous : 1.0f;
  } else if (keep_scale_on_zero && !(amax > 0.0f)) {
    scale = previous;
  } else {
    float divisor = 1.0f;  // 2^margin, exactly
    for (int i = 0; i < margin; ++i) divisor *= 2.0f;
    scale = (fp8_max / (amax > kFp8AmaxFloor ? amax : kFp8AmaxFloor)) / divisor;
  }
  return {scale, 1.0f / scale};
}

}  // namespace mixtrain::backends
