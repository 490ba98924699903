// Unary, binary, comparison and where on CUDA: operands merged into ElemIters for the kernels.
#include "backends/elementwise.h"
#include "backends/cuda/context.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/operands.h"
#include "kernels/cuda/elementwise.h"

namespace mixtrain::backends::cuda {

void unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryScalars s) {
  kernels::unary(op, x.dtype(), make_iter<2>(unary_op_name(op), {&out, &x}), s, context(out).stream);
}

void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& grad_y,
                                 const Tensor& grad_x, UnaryScalars s) {
  // x or y may be undefined when the formula does not read it; grad_y stands in (same shape).
  const Tensor& xs = x.defined() ? x : grad_y;
  const Tensor& ys = y.defined() ? y : grad_y;
  kernels::unary_backward(op, grad_y.dtype(), make_iter<4>(unary_op_name(op), {&grad_x, &xs, &ys, &grad_y}), s,
                          context(grad_x).stream);
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  kernels::binary(op, out.dtype(), make_iter<3>(binary_op_name(op), {&out, &a, &b}), context(out).stream);
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out) {
  kernels::binary_scalar(op, out.dtype(), make_iter<2>(binary_op_name(op), {&out, &a}), s, scalar_first,
                         context(out).stream);
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  kernels::compare(op, a.dtype(), make_iter<3>("compare", {&out, &a, &b}), context(out).stream);
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  kernels::where(out.dtype(), make_iter<4>("where", {&out, &cond, &a, &b}), context(out).stream);
}

void register_elementwise() {
  backends::unary.set(DeviceType::CUDA, unary);
  backends::unary_backward.set(DeviceType::CUDA, unary_backward);
  backends::binary.set(DeviceType::CUDA, binary);
  backends::binary_scalar.set(DeviceType::CUDA, binary_scalar);
  backends::compare.set(DeviceType::CUDA, compare);
  backends::where.set(DeviceType::CUDA, where);
}

}  // namespace mixtrain::backends::cuda
