#pragma once
// The amp family's kernels (amp::GradScaler). Scalars live in device tensors, so neither call
// needs a host synchronisation. A backend without its own kernels gets the fallback of
// backends/amp.cpp (copy to the host, run the CPU kernels, copy back: correct but synchronous).
#include <utility>
#include <vector>

#include "backends/kernel.h"
#include "backends/kernel_types.h"

namespace mixtrain::backends {

// One fused pass over a list of gradients of one dtype (outs: one dtype, the grads' or, for half
// grads, fp32): outs[i] = grads[i] * inv_scale (outs[i] may be grads[i]: in place; values are left
// as they are when inv_scale == 1), and found_inf is set to 1 if any element is inf or NaN (never
// cleared: the caller zeroes it, so buckets OR into one flag). inv_scale, found_inf: 0-dim fp32.
// stats: undefined, or fp64 [kAmpStatsSize] accumulated over the scaled (input) values: max |g|
// over finite elements, count of zeros, count with 0 < |g| < 2^-14 (subnormal in fp16), count.
MT_KERNEL(amp, non_finite_check_and_unscale,
          void(const std::vector<Tensor>& grads, const std::vector<Tensor>& outs, const Tensor& inv_scale,
               const Tensor& found_inf, const Tensor& stats));
// scale: 0-dim fp32; growth_tracker, hysteresis_tracker: 0-dim int32; found_inf: 0-dim fp32
// (nonzero = overflow); at_min_scale: 0-dim fp32 set to 1 or 0 (see ScaleUpdateArgs).
MT_KERNEL(amp, update_scale,
          void(const Tensor& scale, const Tensor& growth_tracker, const Tensor& hysteresis_tracker,
               const Tensor& found_inf, const ScaleUpdateArgs& args, const Tensor& at_min_scale));

// non_finite_check_and_unscale's arguments, checked (the message names what is wrong), as
// contiguous work lists for the kernels: strided gradients are copied, and strided outputs get a
// contiguous work tensor that the backend copies back into them afterwards (copy_back).
struct UnscaleWork {
  std::vector<Tensor> grads, outs;
  std::vector<std::pair<Tensor, Tensor>> copy_back;  // (work tensor, the caller's output)
  DType grad_dtype = DType::Float32, out_dtype = DType::Float32;
};
UnscaleWork prepare_unscale(const std::vector<Tensor>& grads, const std::vector<Tensor>& outs,
                            const Tensor& inv_scale, const Tensor& found_inf, const Tensor& stats);
void check_update_scale_args(const Tensor& scale, const Tensor& growth_tracker, const Tensor& hysteresis_tracker,
                             const Tensor& found_inf, const Tensor& at_min_scale);

// Registers the copy-through-the-host defaults above as the amp kernels' fallback.
void register_amp_fallback();

}  // namespace mixtrain::backends
