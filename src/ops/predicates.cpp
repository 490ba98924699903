// Truth tests: all, any, equal, isclose, allclose. Composites of comparisons, where and sum, so
// every backend (meta included) runs them without a kernel of their own.
#include "ops/op_helpers.h"

namespace mixtrain {

using namespace ops;

namespace {

Tensor zero_like_scalar(const Tensor& x) { return zeros({}, TensorOptions(x.dtype()).device(x.device())); }
Tensor bool_scalar(bool v, const Tensor& like) { return full({}, v ? 1.0 : 0.0, TensorOptions(kBool).device(like.device())); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return where(a, b, bool_scalar(false, a)); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return where(a, bool_scalar(true, a), b); }
Tensor isnan(const Tensor& x) { return ne(x, x); }

// all: no element over dims is zero; any: some element is not. Counted (int64) and compared with
// 0, so NaN counts as non-zero and an empty reduction is true for all, false for any, as PyTorch.
Tensor truth_test(OpId id, const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim, bool any) {
  Tensor x = x_in;
  OpScope scope(id, {&x});
  check_defined(op_name(id), x, "input");
  NoGradGuard no_grad;
  const Tensor zero = zero_like_scalar(x);
  const Tensor count = sum(any ? ne(x.detach(), zero) : eq(x.detach(), zero), dims, keepdim);
  const Tensor none = zero_like_scalar(count);
  return any ? gt(count, none) : eq(count, none);
}

}  // namespace

Tensor all(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return truth_test(OpId::all, x, dims, keepdim, /*any=*/false);
}
Tensor any(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return truth_test(OpId::any, x, dims, keepdim, /*any=*/true);
}

bool equal(const Tensor& a, const Tensor& b) {
  check_defined("equal", a, "first input");
  check_defined("equal", b, "second input");
  check_same_device("equal", a, b);
  MT_CHECK(!a.device().is_meta(), "equal: ", describe(a), " is on the meta device, which holds no values to compare");
  if (a.shape() != b.shape()) return false;
  NoGradGuard no_grad;
  return all(eq(a.detach(), b.detach())).item<bool>();
}

Tensor isclose(const Tensor& a_in, const Tensor& b_in, double rtol, double atol, bool equal_nan) {
  const char* op = "isclose";
  check_defined(op, a_in, "first input");
  check_defined(op, b_in, "second input");
  check_same_device(op, a_in, b_in);
  MT_CHECK(a_in.dtype() == b_in.dtype(), op, ": expected both tensors to have the same dtype, got ", describe(a_in),
           " and ", describe(b_in));
  MT_CHECK(rtol >= 0 && atol >= 0, op, ": rtol and atol must be non-negative, got rtol ", rtol, " and atol ", atol);
  NoGradGuard no_grad;
  const Tensor a = a_in.detach(), b = b_in.detach();
  Tensor close = eq(a, b);  // exact matches, infinities of one sign included
  if (a.dtype() == kBool) return close;
  if (equal_nan && is_floating(a.dtype())) close = logical_or(close, logical_and(isnan(a), isnan(b)));
  // PyTorch's formula, in the inputs' dtype for floats (integers in fp64): a finite difference
  // within atol + rtol * |b|.
  const Tensor af = is_floating(a.dtype()) ? a : a.to(kFloat64), bf = is_floating(b.dtype()) ? b : b.to(kFloat64);
  const Tensor actual = abs(sub(af, bf));
  const Tensor allowed = add(abs(mul(bf, rtol)), atol);
  const Tensor finite = eq(sub(actual, actual), zero_like_scalar(actual));
  return logical_or(close, logical_and(finite, le(actual, allowed)));
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  check_defined("allclose", a, "first input");
  MT_CHECK(!a.device().is_meta(), "allclose: ", describe(a), " is on the meta device, which holds no values to compare");
  return all(isclose(a, b, rtol, atol, equal_nan)).item<bool>();
}

Tensor Tensor::all() const { return mixtrain::all(*this); }
Tensor Tensor::all(const DimList& dims, bool keepdim) const { return mixtrain::all(*this, dims.vec(), keepdim); }
Tensor Tensor::any() const { return mixtrain::any(*this); }
Tensor Tensor::any(const DimList& dims, bool keepdim) const { return mixtrain::any(*this, dims.vec(), keepdim); }
bool Tensor::equal(const Tensor& other) const { return mixtrain::equal(*this, other); }
bool Tensor::allclose(const Tensor& other, double rtol, double atol, bool equal_nan) const {
  return mixtrain::allclose(*this, other, rtol, atol, equal_nan);
}

}  // namespace mixtrain
