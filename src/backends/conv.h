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

// The three kernels above, for conv2d_workspace_bytes.
enum class ConvDirection { Forward, BackwardInput, BackwardWeight };
// Sets *bytes to the scratch this backend's kernel for `direction` would take from the allocator
// of GPU `device` for operands shaped like x [N, C, H, W], w and y [N, Cout, Ho, Wo]: their shapes,
// dtype and the kernel's output layout decide it, not their values, so meta tensors do. The CUDA
// backend registers it (cuDNN's algorithm choice and that algorithm's workspace, which needs a
// GPU to ask); the dry run asks it when it plans for a CUDA target on a machine with one.
MT_KERNEL(conv, conv2d_workspace_bytes,
          void(ConvDirection direction, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p,
               int device, size_t* bytes));

}  // namespace mixtrain::backends
