#pragma once
// Shared pieces of the op definitions: argument checks with uniform messages, output
// allocation, and the reduction that undoes broadcasting in backward.
#include <string>

#include "backends/kernel_types.h"
#include "mixtrain/autograd/node.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/core/tensor.h"
#include "mixtrain/ops/dispatch.h"
#include "mixtrain/ops/functional.h"

namespace mixtrain::ops {

using autograd::TensorList;

// "[2, 3] float32 cpu"
std::string describe(const Tensor& t);

void check_defined(const char* op, const Tensor& t, const char* what);
void check_floating(const char* op, const Tensor& t);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);

// A new contiguous tensor of `shape` with like's dtype and device.
Tensor new_empty(const Shape& shape, const Tensor& like);
Tensor new_empty(const Shape& shape, const Tensor& like, DType dtype);
// The output of an elementwise op: in like's layout when like has `shape` and is channels-last
// (PyTorch's preserve_format, for the one other layout mixtrain has), else contiguous.
Tensor new_empty_preserving(const Shape& shape, const Tensor& like, DType dtype);
Tensor new_empty_preserving(const Shape& shape, const Tensor& like);
// Of two operands: channels-last when either has `shape` and is channels-last.
Tensor new_empty_preserving(const Shape& shape, const Tensor& a, const Tensor& b, DType dtype);

// Sums g over the dimensions that broadcasting expanded, giving a tensor of `shape`.
Tensor sum_to(const Tensor& g, const Shape& shape);

// A kernel's copy of an input, without history (the op records autograd): contiguous, or in
// `format` when 4-D (a convolution's layout); undefined stays undefined.
Tensor kernel_input(const Tensor& t, MemoryFormat format = MemoryFormat::Contiguous);

// Tensors whose last two dims are not unit-strided in either order are copied for the GEMM.
Tensor gemm_ready(const Tensor& t);

// Softmax over the last dim of attention scores [..., L, S] with the causal mask (query i
// attends to keys j <= i, top-left aligned) applied inside the kernel, in the scores' dtype
// (fp32 arithmetic for half, rounded once). For scaled_dot_product_attention.
Tensor causal_softmax(const Tensor& scores);

// Throws when an in-place op would modify a tensor autograd needs untouched.
void check_inplace(const char* op, const Tensor& self);
// For the differentiable in-place ops (ops/inplace.cpp): self is floating, has no element in two
// places, and autograd allows writing it (autograd::check_inplace_autograd).
void check_writable_inplace(const char* op, const Tensor& self);

}  // namespace mixtrain::ops
