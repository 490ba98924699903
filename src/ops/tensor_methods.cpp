// Tensor methods and operators: thin forwards to the functional ops (arithmetic, reductions,
// comparisons), and the value readers (to_vector, item), which copy to the host through to().
#include "mixtrain/base/dtype_traits.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/ops/functional.h"
#include "ops/op_helpers.h"

namespace mixtrain {

template <class T>
std::vector<T> Tensor::to_vector() const {
  MT_CHECK(!device().is_meta(), "to_vector: ", summary(), " is on the meta device, which holds shapes and dtypes ",
           "but no values to read");
  Tensor host = to(Device::cpu(), dtype_of<T>::value).contiguous();
  const T* p = host.data_ptr<T>();
  return std::vector<T>(p, p + host.numel());
}

template <class T>
T Tensor::item() const {
  MT_CHECK(numel() == 1, "item: tensor of shape ", shape_str(shape()), " has ", numel(),
           " elements, expected exactly one");
  MT_CHECK(!device().is_meta(), "item: ", summary(), " is on the meta device, which holds shapes and dtypes but ",
           "no value to read");
  return to_vector<T>()[0];
}

Scalar Tensor::item() const {
  if (is_floating(dtype())) return Scalar(item<double>());
  if (dtype() == kBool) return Scalar(item<bool>());
  return Scalar(item<int64_t>());
}

Tensor Tensor::type_as(const Tensor& other) const {
  MT_CHECK(defined() && other.defined(), "type_as: expected defined tensors");
  return to(other.device(), other.dtype());
}

#define MT_INSTANTIATE_READERS(T)                   \
  template std::vector<T> Tensor::to_vector<T>() const; \
  template T Tensor::item<T>() const;
MT_INSTANTIATE_READERS(float)
MT_INSTANTIATE_READERS(double)
MT_INSTANTIATE_READERS(Half)
MT_INSTANTIATE_READERS(BFloat16)
MT_INSTANTIATE_READERS(int64_t)
MT_INSTANTIATE_READERS(int32_t)
MT_INSTANTIATE_READERS(bool)
#undef MT_INSTANTIATE_READERS

#define MT_PLAIN_UNARY(code, name) \
  Tensor Tensor::name() const { return mixtrain::name(*this); }
MT_FOR_PLAIN_UNARY_OPS
#undef MT_PLAIN_UNARY
Tensor Tensor::pow(double exponent) const { return mixtrain::pow(*this, exponent); }
Tensor Tensor::sum() const { return mixtrain::sum(*this); }
Tensor Tensor::sum(const DimList& dims, bool keepdim) const { return mixtrain::sum(*this, dims.vec(), keepdim); }
Tensor Tensor::mean() const { return mixtrain::mean(*this); }
Tensor Tensor::mean(const DimList& dims, bool keepdim) const { return mixtrain::mean(*this, dims.vec(), keepdim); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return mixtrain::argmax(*this, dim, keepdim); }
Tensor Tensor::softmax(int64_t dim) const { return mixtrain::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return mixtrain::log_softmax(*this, dim); }
Tensor Tensor::matmul(const Tensor& other) const { return mixtrain::matmul(*this, other); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return rdiv(b, a); }
Tensor operator-(const Tensor& a) { return neg(a); }

// Reductions with indices and comparisons, as libtorch spells them.

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
