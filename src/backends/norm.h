#pragma once
// The norm family's kernels (ops/norm.cpp: batch_norm, group_norm, layer_norm). Inputs are
// contiguous; "stat" tensors are fp32 for fp16/bf16/fp32 inputs and fp64 for fp64 inputs.
#include <cstdint>

#include "backends/kernel.h"

namespace mixtrain::backends {

// Batch norm over x viewed as [N, C, S]. Per channel: mean and invstd = 1/sqrt(var + eps) with
// the biased variance, into stat tensors [C]. When running_mean/var are defined (any floating
// dtype) they are updated in place: r = (1 - momentum) r + momentum * stat, with the unbiased
// variance.
MT_KERNEL(norm, batch_norm_stats,
          void(const Tensor& x, int64_t n, int64_t c, int64_t s, double eps, const Tensor& mean,
               const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var, double momentum));
// out = (x - mean[c]) * invstd[c] * weight[c] + bias[c]; weight and bias may be undefined or of
// x's dtype or fp32.
MT_KERNEL(norm, batch_norm,
          void(const Tensor& x, int64_t n, int64_t c, int64_t s, const Tensor& mean, const Tensor& invstd,
               const Tensor& weight, const Tensor& bias, const Tensor& out));
// With batch_stats (training) the gradient flows through mean and invstd too; without, they are
// constants (eval). Any of grad_x, grad_weight, grad_bias may be undefined (not wanted).
MT_KERNEL(norm, batch_norm_backward,
          void(const Tensor& x, const Tensor& grad_y, int64_t n, int64_t c, int64_t s, const Tensor& mean,
               const Tensor& invstd, const Tensor& weight, bool batch_stats, const Tensor& grad_x,
               const Tensor& grad_weight, const Tensor& grad_bias));
// Group norm over x viewed as [N, G, C/G, S]: statistics per (n, g) into mean, rstd [N, G]
// (stat dtype), affine per channel. weight/bias as for batch_norm.
MT_KERNEL(norm, group_norm,
          void(const Tensor& x, int64_t n, int64_t c, int64_t s, int64_t groups, double eps, const Tensor& weight,
               const Tensor& bias, const Tensor& out, const Tensor& mean, const Tensor& rstd));
MT_KERNEL(norm, group_norm_backward,
          void(const Tensor& x, const Tensor& grad_y, int64_t n, int64_t c, int64_t s, int64_t groups,
               const Tensor& mean, const Tensor& rstd, const Tensor& weight, const Tensor& grad_x,
               const Tensor& grad_weight, const Tensor& grad_bias));
// Layer norm over x viewed as [rows, cols]: statistics per row into mean, rstd [rows], affine
// per column.
MT_KERNEL(norm, layer_norm,
          void(const Tensor& x, int64_t rows, int64_t cols, double eps, const Tensor& weight, const Tensor& bias,
               const Tensor& out, const Tensor& mean, const Tensor& rstd));
MT_KERNEL(norm, layer_norm_backward,
          void(const Tensor& x, const Tensor& grad_y, int64_t rows, int64_t cols, const Tensor& mean,
               const Tensor& rstd, const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
               const Tensor& grad_bias));

}  // namespace mixtrain::backends
