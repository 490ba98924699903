#pragma once
// The functional ops, named as in PyTorch. Each validates its inputs (mixtrain::Error naming the
// op, shapes, dtypes and devices), offers them to autocast, records autograd and runs the kernel
// of the inputs' device.
#include <optional>
#include <tuple>
#include <vector>

#include "mixtrain/base/elementwise_ops.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain {

// Casts and copies.
Tensor to(const Tensor& x, DType dtype);
Tensor to(const Tensor& x, Device device);
Tensor contiguous(const Tensor& x);
Tensor contiguous(const Tensor& x, MemoryFormat format);
Tensor clone(const Tensor& x);

// Matrix products.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// relu(linear(x, weight, bias)) with the ReLU in the GEMM's epilogue: no separate pass over the
// output and no pre-activation kept for backward. The same values and gradients, bit for bit on
// the CPU; autocast treats it as linear. nn::Sequential uses it for a Linear followed by a ReLU.
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// Inner product of two 1-D tensors of the same length and dtype (a 0-dim tensor).
Tensor dot(const Tensor& a, const Tensor& b);

// Elementwise (broadcasting, type promotion): add, sub, mul, div, pow, maximum, minimum, hypot,
// one per entry of MT_BINARY_OPS (mixtrain/base/elementwise_ops.h).
#define MT_BINARY_FN(code, name, ...) Tensor name(const Tensor& a, const Tensor& b);
MT_BINARY_OPS(MT_BINARY_FN)
#undef MT_BINARY_FN
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor rsub(const Tensor& a, double b);  // b - a
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor rdiv(const Tensor& a, double b);  // b / a
Tensor pow(const Tensor& a, double exponent);
// The plain unary ops (neg, exp, log, sqrt, tanh, ...), one per `plain` entry of MT_UNARY_OPS
// (mixtrain/base/elementwise_ops.h).
#define MT_PLAIN_UNARY(code, name) Tensor name(const Tensor& x);
MT_FOR_PLAIN_UNARY_OPS
#undef MT_PLAIN_UNARY
// The unary ops with two scalars (softplus(x, beta = 1, threshold = 20)), one per row of
// MT_UNARY_SCALARS, with PyTorch's names and defaults.
#define MT_SCALARS_UNARY(code, name, first, first_default, second, second_default) \
  Tensor name(const Tensor& x, double first = first_default, double second = second_default);
MT_UNARY_SCALARS(MT_SCALARS_UNARY)
#undef MT_SCALARS_UNARY
Tensor& relu_(Tensor& x);  // x.relu_(): in place, differentiable (Tensor::relu_)
// self + value * t1 * t2 (broadcasting, type promotion over all three). Half results are computed
// in fp32 and rounded once, as PyTorch's fused kernel does.
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value = 1.0);

// Comparisons give bool tensors; where picks elementwise.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// where: any dtypes (promoted); differentiable in the floating ones.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x with `value` where mask is true (mask bool, broadcastable to x's shape; value cast to x's
// dtype, a 0-d tensor value gets the gradient of the filled places).
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value);
// min(max(x, min), max) as libtorch: at least one bound; the result dtype promotes x with the
// bounds (an int tensor with a floating bound gives float32); NaN propagates; the gradient
// passes where min < x < max (0 on a bound, as PyTorch 2.x). The Tensor bounds broadcast and get
// the gradient of the places they set, shared evenly with x where x equals the bound (PyTorch's
// maximum/minimum rule).
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
Tensor clamp(const Tensor& x, const std::optional<Tensor>& min, const std::optional<Tensor>& max = std::nullopt);
Tensor clamp_min(const Tensor& x, const Scalar& min);
Tensor clamp_max(const Tensor& x, const Scalar& max);

// Truth tests. all/any: bool tensors, whether every/any element (over dims; all when empty) is
// non-zero (NaN counts as non-zero); an empty reduction is true for all, false for any.
// equal: same shape and the same values (after type promotion; NaN is never equal), on one device.
// isclose: |a - b| <= atol + rtol * |b| elementwise, or a == b (infinities), NaNs equal only with
// equal_nan; a and b of one dtype, broadcast. allclose: isclose everywhere.
Tensor all(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor any(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
bool equal(const Tensor& a, const Tensor& b);
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);

// Reductions. dims empty = all. dtype: accumulate and return in this dtype (as torch.sum(dtype=)).
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false,
           std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);
// The largest value over dims (empty = all), as torch.amax: NaN propagates; the gradient is shared
// evenly by the elements equal to the maximum (max(x, dim) gives it to the first one).
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
// The k largest (largest = false: smallest) elements of x along dim, with their int64 indices:
// always in order (sorted = false is accepted and gives the same), ties in index order, NaN
// above every number. Floating x is differentiable (the gradient goes back to the picked places).
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// The p-norm over dims (all when empty), as torch.norm / linalg.vector_norm: p = 2 by default,
// 1, inf (max |x|), -inf (min |x|), 0 (count of non-zeros) or any other p ((sum |x|^p)^(1/p)).
// Floating x; half inputs are computed in fp32 and the result rounded once. Differentiable, with
// PyTorch's subgradients (0 where the norm is 0; inf: split evenly among the maxima).
Tensor norm(const Tensor& x, const Scalar& p = 2, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// Lists of tensors. cat and stack follow type promotion when dtypes differ (an fp16 and an fp32
// tensor give fp32), and every input gets its slice of the gradient back in its own dtype.
// split and chunk return views (the last piece may be smaller), as in PyTorch.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// Views (functional spellings of the Tensor methods).
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x);               // every dimension of size 1
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);

}  // namespace mixtrain
