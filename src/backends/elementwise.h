#pragma once
// The elementwise family's kernels (ops/elementwise.cpp). Inputs may be strided (broadcast
// inputs arrive as expanded views with stride 0) and share one dtype (the ops layer casts
// first); half types compute in fp32 and round once.
#include "backends/kernel.h"
#include "backends/kernel_types.h"

namespace mixtrain::backends {

// out = op(x; s), s the op's scalars (pow's exponent, softplus's beta and threshold).
MT_KERNEL(elementwise, unary, void(UnaryOp op, const Tensor& x, const Tensor& out, UnaryScalars s));
// grad_x = grad_y * d op / dx, given the input x and the output y of the forward.
MT_KERNEL(elementwise, unary_backward,
          void(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& grad_y, const Tensor& grad_x,
               UnaryScalars s));
// out = a op b; a and b already have out's shape (broadcast through zero strides).
MT_KERNEL(elementwise, binary, void(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out));
// out = a op s, or s op a when scalar_first.
MT_KERNEL(elementwise, binary_scalar,
          void(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out));
// out (bool) = a cmp b, shapes as for binary.
MT_KERNEL(elementwise, compare, void(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out));
// out = cond ? a : b; all of out's shape.
MT_KERNEL(elementwise, where, void(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out));

}  // namespace mixtrain::backends
