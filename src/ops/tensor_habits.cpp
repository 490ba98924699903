// libtorch spellings built from existing ops: reductions by one dim, max/min with indices,
// var/std, index_select, comparisons as methods and operators.
#include "mixtrain/ops/tensor_habits.h"

#include "mixtrain/autograd/grad_mode.h"
#include "mixtrain/core/error.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/ops/nn_functional.h"
#include "mixtrain/ops/functional.h"
#include "ops/op_helpers.h"

namespace mixtrain {

// ---- reductions -------------------------------------------------------------------------------

Tensor Tensor::max() const { return mixtrain::max(*this); }
Tensor Tensor::min() const { return mixtrain::min(reshape({-1}), 0); }

std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const {
  return {mixtrain::max(*this, dim, keepdim), mixtrain::argmax(*this, dim, keepdim)};
}

std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const {
  return {mixtrain::min(*this, dim, keepdim), argmin(dim, keepdim)};
}

Tensor Tensor::argmin(int64_t dim, bool keepdim) const {
  MT_CHECK(dtype() != kBool, "argmin: bool tensors are not supported, got ", ops::describe(*this));
  NoGradGuard no_grad;
  // The first largest of -x is the first smallest of x.
  return mixtrain::argmax(mixtrain::neg(detach()), dim, keepdim);
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, bool unbiased, bool keepdim) {
  const char* op = "var";
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x);
  const Tensor xf = is_half(x.dtype()) ? x.to(kFloat32) : x;
  int64_t n = 1;
  if (dims.empty()) {
    n = x.numel();
  } else {
    for (int64_t d : dims) {
      MT_CHECK(d >= -x.dim() && d < x.dim(), op, ": dim ", d, " is out of range for ", ops::describe(x));
      n *= x.size(d < 0 ? d + x.dim() : d);
    }
  }
  const Tensor centred = xf - mixtrain::mean(xf, dims, /*keepdim=*/true);
  // n - 1 = 0 gives 0 / 0 = nan, as in PyTorch.
  Tensor v = mixtrain::sum(centred * centred, dims, keepdim) / static_cast<double>(unbiased ? n - 1 : n);
  return v.dtype() == x.dtype() ? v : v.to(x.dtype());
}

Tensor std(const Tensor& x, const std::vector<int64_t>& dims, bool unbiased, bool keepdim) {
  const Tensor v = var(is_half(x.dtype()) ? x.to(kFloat32) : x, dims, unbiased, keepdim).sqrt();
  return v.dtype() == x.dtype() ? v : v.to(x.dtype());
}

Tensor Tensor::var(bool unbiased) const { return mixtrain::var(*this, {}, unbiased, false); }
Tensor Tensor::var(const DimList& dims, bool unbiased, bool keepdim) const {
  return mixtrain::var(*this, dims.vec(), unbiased, keepdim);
}
Tensor Tensor::var(int dim, bool unbiased, bool keepdim) const { return mixtrain::var(*this, {dim}, unbiased, keepdim); }
Tensor Tensor::var(int64_t dim, bool unbiased, bool keepdim) const {
  return mixtrain::var(*this, {dim}, unbiased, keepdim);
}
Tensor Tensor::std(bool unbiased) const { return mixtrain::std(*this, {}, unbiased, false); }
Tensor Tensor::std(int dim, bool unbiased, bool keepdim) const { return mixtrain::std(*this, {dim}, unbiased, keepdim); }
Tensor Tensor::std(int64_t dim, bool unbiased, bool keepdim) const {
  return mixtrain::std(*this, {dim}, unbiased, keepdim);
}
Tensor Tensor::std(const DimList& dims, bool unbiased, bool keepdim) const {
  return mixtrain::std(*this, dims.vec(), unbiased, keepdim);
}

// ---- index_select -----------------------------------------------------------------------------

Tensor index_select(const Tensor& x, int64_t dim_in, const Tensor& index) {
  const char* op = "index_select";
  ops::check_defined(op, x, "input");
  ops::check_defined(op, index, "index");
  MT_CHECK(x.dim() >= 1, op, ": expected a tensor with at least one dimension, got ", ops::describe(x));
  MT_CHECK(index.dtype() == kInt64 && index.dim() <= 1, op, ": index must be an int64 tensor of 0 or 1 dimensions, got ",
           ops::describe(index));
  ops::check_same_device(op, x, index);
  MT_CHECK(dim_in >= -x.dim() && dim_in < x.dim(), op, ": dim ", dim_in, " is out of range for ", ops::describe(x));
  const int64_t dim = dim_in < 0 ? dim_in + x.dim() : dim_in;
  const int64_t n = x.size(dim);
  const Tensor idx = index.reshape({-1});
  if (idx.device().is_cpu()) {
    for (int64_t i : idx.contiguous().to_vector<int64_t>())
      MT_CHECK(i >= 0 && i < n, op, ": index ", i, " is out of range for dimension ", dim, " of size ", n, " (",
               ops::describe(x), ")");
  }
  // Move dim to the front and view the rest as one row: then a row gather, which embedding does
  // on every backend (and differentiably, adding up the gradient of repeated rows).
  const Tensor front = dim == 0 ? x : x.transpose(0, dim);
  Shape rest(front.shape().begin() + 1, front.shape().end());
  int64_t row = 1;
  for (int64_t s : rest) row *= s;
  Tensor rows;
  if (is_floating(x.dtype()) && row > 0) {
    rows = nn::functional::embedding(idx, front.reshape({n, row}));
  } else {  // integers and bools: no gradient, gathered slice by slice
    NoGradGuard no_grad;
    std::vector<Tensor> picked;
    for (int64_t i : idx.to(Device::cpu()).contiguous().to_vector<int64_t>()) picked.push_back(front.select(0, i));
    Shape empty_shape = rest;
    empty_shape.insert(empty_shape.begin(), 0);
    rows = picked.empty() ? Tensor::empty(empty_shape, x.options()) : stack(picked, 0);
  }
  Shape out_shape = rest;
  out_shape.insert(out_shape.begin(), idx.numel());
  const Tensor out = rows.reshape(out_shape);
  return dim == 0 ? out : out.transpose(0, dim).contiguous();
}

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return mixtrain::index_select(*this, dim, index); }

// ---- comparisons ------------------------------------------------------------------------------

namespace {
// A scalar as PyTorch wraps it: in the tensor's dtype when that holds it (floats, or integers
// for an integral value), else in the default float dtype.
Tensor wrap_scalar(const Tensor& like, double v) {
  ops::check_defined("comparison", like, "input");
  DType dt = like.dtype();
  const bool integral = v == static_cast<double>(static_cast<int64_t>(v));
  if (!is_floating(dt)) dt = integral ? (dt == kBool ? kInt64 : dt) : kFloat32;
  return scalar_tensor(v, TensorOptions(dt).device(like.device()));
}
}  // namespace

Tensor Tensor::eq(const Tensor& o) const { return mixtrain::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return mixtrain::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return mixtrain::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return mixtrain::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return mixtrain::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return mixtrain::ge(*this, o); }
Tensor Tensor::eq(double o) const { return mixtrain::eq(*this, wrap_scalar(*this, o)); }
Tensor Tensor::ne(double o) const { return mixtrain::ne(*this, wrap_scalar(*this, o)); }
Tensor Tensor::lt(double o) const { return mixtrain::lt(*this, wrap_scalar(*this, o)); }
Tensor Tensor::le(double o) const { return mixtrain::le(*this, wrap_scalar(*this, o)); }
Tensor Tensor::gt(double o) const { return mixtrain::gt(*this, wrap_scalar(*this, o)); }
Tensor Tensor::ge(double o) const { return mixtrain::ge(*this, wrap_scalar(*this, o)); }

Tensor operator==(const Tensor& a, const Tensor& b) { return a.eq(b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return a.ne(b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return a.lt(b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return a.le(b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return a.gt(b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return a.ge(b); }
Tensor operator==(const Tensor& a, double b) { return a.eq(b); }
Tensor operator!=(const Tensor& a, double b) { return a.ne(b); }
Tensor operator<(const Tensor& a, double b) { return a.lt(b); }
Tensor operator<=(const Tensor& a, double b) { return a.le(b); }
Tensor operator>(const Tensor& a, double b) { return a.gt(b); }
Tensor operator>=(const Tensor& a, double b) { return a.ge(b); }

}  // namespace mixtrain
