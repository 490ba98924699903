#pragma once
// Gradient clipping, as torch.nn.utils.clip_grad_norm_.
#include <limits>
#include <vector>

#include "mixtrain/core/tensor.h"

namespace mixtrain::nn::utils {

constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// Scales the gradients of `parameters` in place so that their total norm (the norm of the
// vector of all gradient elements) is at most max_norm: every gradient is multiplied by
// max_norm / (total_norm + 1e-6) when that is below 1. norm_type: any p > 0, or kInfNorm (the
// largest absolute element). Parameters without a gradient are skipped. Returns the total norm
// before clipping, accumulated in fp64 whatever the gradients' dtype. A non-finite total norm is
// returned as is and the gradients are scaled by the (NaN or zero) factor, as PyTorch does with
// error_if_nonfinite=false; a GradScaler that unscaled them has already recorded the overflow.
// With master weights, clip optimizer.master_params() after GradScaler::unscale_.
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0);
double clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type = 2.0);

}  // namespace mixtrain::nn::utils
