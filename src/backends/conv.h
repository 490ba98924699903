#pragma once
// The conv family's kernels (ops/conv.cpp: conv2d and conv_transpose2d share them). Operands
// are contiguous in NCHW or channels-last order (the output decides).
#include "backends/kernel.h"
#include "backends/kernel_types.h"

namespace mixtrain::backends {

// out [N, Cout, Ho, Wo] = conv(x, w) (+ bias [Cout], may be undefined).
MT_KERNEL(conv, conv2d,
          void(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out));
// grad_x (its shape gives H, W) = the adjoint of conv2d w.r.t. x applied to grad_out; this is
// also the forward of conv_transpose2d.
MT_KERNEL(conv, conv2d_backward_input,
          void(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x));
// grad_w [Cout, C/groups, kh, kw] = sum over the batch of grad_out (x) im2col(x).
MT_KERNEL(conv, conv2d_backward_weight,
          void(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p, const Tensor& grad_w));

}  // namespace mixtrain::backends
