#pragma once
// Gradient clipping, as torch.nn.utils.clip_grad_norm_.
#include <limits>
#include <vector>

#include "mixtrain/core/tensor.h"

namespace mixtrain::nn::utils {

constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// Scales the gradients of `parameters` in place so that their total norm (the norm of the
// vector of all gradient elements) is at most max_norm: every gradient is multiplied by
// min(max_norm / (total_norm + 1e-6), 1). norm_type: any p > 0, or kInfNorm (the largest absolute
// element). Parameters without a gradient are skipped.
// Returns the total norm before clipping as a 0-d tensor, as PyTorch does: fp32 (fp64 when a
// gradient is fp64), on the device of the gradients, so clipping device gradients waits for
// nothing; call .item<double>() on it when the value is needed (host gradients are summed in fp64).
// A non-finite total norm is returned as is and the gradients are scaled by the (NaN or zero)
// factor, as PyTorch does with error_if_nonfinite=false; a GradScaler that unscaled them has
// already recorded the overflow. error_if_nonfinite=true throws instead and leaves the gradients
// alone (it reads the norm back). With master weights, clip optimizer.master_params() after
// GradScaler::unscale_.
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
Tensor clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace mixtrain::nn::utils
