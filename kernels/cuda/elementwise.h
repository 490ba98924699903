#pragma once
// The elementwise family's launchers (elementwise.cu), called by backends/cuda/elementwise.cpp;
// what every launcher takes and does: launch_args.h.
#include "kernels/cuda/launch_args.h"

namespace mixtrain::kernels {

void unary(backends::UnaryOp op, DType dtype, const ElemIter<2>& it, backends::UnaryScalars s, cudaStream_t stream);
// operands: grad_x, x, y, grad_y
void unary_backward(backends::UnaryOp op, DType dtype, const ElemIter<4>& it, backends::UnaryScalars s,
                    cudaStream_t stream);
void binary(backends::BinaryOp op, DType dtype, const ElemIter<3>& it, cudaStream_t stream);
void binary_scalar(backends::BinaryOp op, DType dtype, const ElemIter<2>& it, double s, bool scalar_first,
                   cudaStream_t stream);
void compare(backends::CompareOp op, DType dtype, const ElemIter<3>& it, cudaStream_t stream);
// operands: out, cond (bool), a, b
void where(DType dtype, const ElemIter<4>& it, cudaStream_t stream);

}  // namespace mixtrain::kernels
