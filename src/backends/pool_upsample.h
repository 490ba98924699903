#pragma once
// The pool_upsample family's kernels (ops/pool_upsample.cpp: max_pool2d, upsample / interpolate).
#include "backends/kernel.h"
#include "backends/kernel_types.h"

namespace mixtrain::backends {

// out, indices [N, C, Ho, Wo]; indices (int64) are flat positions h * W + w in the input plane.
MT_KERNEL(pool_upsample, max_pool2d,
          void(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices));
// grad_x = scatter-add of grad_out at indices (overwrites grad_x).
MT_KERNEL(pool_upsample, max_pool2d_backward,
          void(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_x));
// x [N, C, H, W] -> out [N, C, Ho, Wo].
MT_KERNEL(pool_upsample, upsample2d, void(const Tensor& x, const Upsample2dParams& p, const Tensor& out));
// grad_x (overwritten) = adjoint of upsample2d applied to grad_out.
MT_KERNEL(pool_upsample, upsample2d_backward,
          void(const Tensor& grad_out, const Upsample2dParams& p, const Tensor& grad_x));

}  // namespace mixtrain::backends
