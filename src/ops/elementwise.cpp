// Elementwise ops: binary arithmetic with broadcasting and type promotion, scalar forms, unary
// math, comparisons and where. Each op's forward kernel and backward formula sit together.
#include <cmath>

#include "backends/elementwise.h"
#include "ops/op_helpers.h"

namespace mixtrain {

using namespace ops;
using backends::BinaryOp;
using backends::CompareOp;
using backends::UnaryOp;

namespace {

// A broadcast view for the kernel only (no autograd node: the op's backward reduces instead).
Tensor broadcast_for_kernel(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  NoGradGuard no_grad;
  return t.detach().expand(shape);
}

Tensor cast_if_needed(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : t.to(dtype); }

struct Promoted {
  Tensor a, b;
  Shape shape;
};

// Arithmetic wants a floating operand; where and masked_fill take any dtypes.
Promoted promote(const char* op, const Tensor& a, const Tensor& b, bool floating = true) {
  check_defined(op, a, "first input");
  check_defined(op, b, "second input");
  check_same_device(op, a, b);
  MT_CHECK(!floating || is_floating(a.dtype()) || is_floating(b.dtype()), op, ": expected floating tensors, got ",
           describe(a), " and ", describe(b));
  const DType dt = promote_types(a.dtype(), b.dtype());
  return {cast_if_needed(a, dt), cast_if_needed(b, dt), broadcast_shapes(a.shape(), b.shape(), op)};
}

Tensor binary_forward(BinaryOp kop, const Promoted& p) {
  Tensor out = new_empty_preserving(p.shape, p.a, p.b, p.a.dtype());
  backends::binary(out, kop, broadcast_for_kernel(p.a, p.shape), broadcast_for_kernel(p.b, p.shape), out);
  return out;
}

Tensor binary_op(OpId id, BinaryOp kop, const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  OpScope scope(id, {&a, &b});
  const char* name = op_name(id);
  Promoted p = promote(name, a, b);
  Tensor out = binary_forward(kop, p);
  if (!autograd::needs_grad({&p.a, &p.b})) return out;
  const Shape sa = p.a.shape(), sb = p.b.shape();
  const bool ga = p.a.requires_grad(), gb = p.b.requires_grad();
  switch (kop) {
    case BinaryOp::Add:
      autograd::record("AddBackward0", {&out}, {&p.a, &p.b}, [sa, sb](const TensorList& g) {
        return TensorList{sum_to(g[0], sa), sum_to(g[0], sb)};
      });
      break;
    case BinaryOp::Sub:
      autograd::record("SubBackward0", {&out}, {&p.a, &p.b}, [sa, sb, gb](const TensorList& g) {
        return TensorList{sum_to(g[0], sa), gb ? sum_to(neg(g[0]), sb) : Tensor()};
      });
      break;
    case BinaryOp::Mul: {
      const autograd::SavedTensor a_s = gb ? autograd::saved(p.a, "input 0") : autograd::SavedTensor(),
                                  b_s = ga ? autograd::saved(p.b, "input 1") : autograd::SavedTensor();
      autograd::record("MulBackward0", {&out}, {&p.a, &p.b}, [a_s, b_s, sa, sb](const TensorList& g) {
        return TensorList{b_s.defined() ? sum_to(mul(g[0], b_s), sa) : Tensor(),
                          a_s.defined() ? sum_to(mul(g[0], a_s), sb) : Tensor()};
      });
      break;
    }
    case BinaryOp::Div: {
      const autograd::SavedTensor a_s = gb ? autograd::saved(p.a, "input 0") : autograd::SavedTensor(),
                                  b_s = autograd::saved(p.b, "input 1");
      autograd::record("DivBackward0", {&out}, {&p.a, &p.b}, [a_s, b_s, sa, sb, ga](const TensorList& g) {
        return TensorList{ga ? sum_to(div(g[0], b_s), sa) : Tensor(),
                          a_s.defined() ? sum_to(neg(div(mul(g[0], a_s), mul(b_s, b_s))), sb) : Tensor()};
      });
      break;
    }
    case BinaryOp::Pow: {
      const autograd::SavedTensor a_s = autograd::saved(p.a, "input 0"), b_s = autograd::saved(p.b, "input 1"),
                                  o_s = autograd::saved(out, "output 0");
      autograd::record("PowBackward0", {&out}, {&p.a, &p.b}, [a_s, b_s, o_s, sa, sb, ga, gb](const TensorList& g) {
        return TensorList{ga ? sum_to(mul(g[0], mul(b_s, pow(a_s, sub(b_s, 1.0)))), sa) : Tensor(),
                          gb ? sum_to(mul(g[0], mul(o_s, log(a_s))), sb) : Tensor()};
      });
      break;
    }
    case BinaryOp::Maximum:
    case BinaryOp::Minimum: {
      // The gradient goes to the input that was picked, split evenly on ties, as PyTorch's.
      const autograd::SavedTensor a_s = autograd::saved(p.a, "input 0"), b_s = autograd::saved(p.b, "input 1");
      const bool is_max = kop == BinaryOp::Maximum;
      autograd::record(is_max ? "MaximumBackward0" : "MinimumBackward0", {&out}, {&p.a, &p.b},
                       [a_s, b_s, sa, sb, is_max, ga, gb](const TensorList& g) {
                         const Tensor& a = a_s;
                         const Tensor& b = b_s;
                         const Tensor zero = zeros({}, g[0].options());
                         const Tensor tie = eq(a, b), half = mul(g[0], 0.5);
                         const Tensor share = where(tie, half, g[0]);
                         const Tensor a_wins = is_max ? gt(a, b) : lt(a, b), b_wins = is_max ? gt(b, a) : lt(b, a);
                         return TensorList{ga ? sum_to(where(b_wins, zero, share), sa) : Tensor(),
                                           gb ? sum_to(where(a_wins, zero, share), sb) : Tensor()};
                       });
      break;
    }
    case BinaryOp::Hypot: {
      // d hypot(a, b) / da = a / hypot(a, b), as PyTorch's (NaN where a = b = 0, as there).
      const autograd::SavedTensor a_s = ga ? autograd::saved(p.a, "input 0") : autograd::SavedTensor(),
                                  b_s = gb ? autograd::saved(p.b, "input 1") : autograd::SavedTensor(),
                                  o_s = autograd::saved(out, "output 0");
      autograd::record(backward_name(id), {&out}, {&p.a, &p.b}, [a_s, b_s, o_s, sa, sb](const TensorList& g) {
        const Tensor g_over = div(g[0], o_s);
        return TensorList{a_s.defined() ? sum_to(mul(g_over, a_s), sa) : Tensor(),
                          b_s.defined() ? sum_to(mul(g_over, b_s), sb) : Tensor()};
      });
      break;
    }
  }
  return out;
}

Tensor scalar_op(OpId id, BinaryOp kop, const Tensor& a_in, double s, bool scalar_first) {
  Tensor a = a_in;
  OpScope scope(id, {&a});
  const char* name = op_name(id);
  check_defined(name, a, "input");
  check_floating(name, a);
  Tensor out = new_empty_preserving(a.shape(), a);
  backends::binary_scalar(a, kop, a, s, scalar_first, out);
  if (!autograd::needs_grad({&a})) return out;
  const autograd::SavedTensor a_s = (kop == BinaryOp::Div && scalar_first) || kop == BinaryOp::Pow
                                        ? autograd::saved(a, "input 0")
                                        : autograd::SavedTensor();
  const autograd::SavedTensor o_s =
      kop == BinaryOp::Pow && scalar_first ? autograd::saved(out, "output 0") : autograd::SavedTensor();
  autograd::record(backward_name(id), out, {&a}, [kop, s, scalar_first, a_s, o_s](const TensorList& g) -> TensorList {
    switch (kop) {
      case BinaryOp::Add: return {g[0]};
      case BinaryOp::Sub: return {scalar_first ? neg(g[0]) : g[0]};
      case BinaryOp::Mul: return {mul(g[0], s)};
      case BinaryOp::Div: return {scalar_first ? neg(div(mul(g[0], s), mul(a_s, a_s))) : div(g[0], s)};
      case BinaryOp::Pow:
        return {scalar_first ? mul(mul(g[0], o_s), std::log(s)) : mul(mul(g[0], pow(a_s, s - 1.0)), s)};
      default: MT_ERROR(op_name(OpId::add), ": no scalar backward for this op");
    }
  });
  return out;
}

Tensor unary_op(OpId id, UnaryOp kop, const Tensor& x_in, backends::UnaryScalars scalars = {}) {
  Tensor x = x_in;
  OpScope scope(id, {&x});
  const char* name = op_name(id);
  check_defined(name, x, "input");
  check_floating(name, x);
  Tensor out = new_empty_preserving(x.shape(), x);
  backends::unary(x, kop, x, out, scalars);
  if (!autograd::needs_grad({&x})) return out;
  const autograd::SavedTensor x_s = backends::unary_backward_reads_input(kop) ? autograd::saved(x, "input 0") : autograd::SavedTensor();
  const autograd::SavedTensor y_s = backends::unary_backward_reads_output(kop) ? autograd::saved(out, "output 0") : autograd::SavedTensor();
  autograd::record(backward_name(id), out, {&x}, [kop, scalars, x_s, y_s](const TensorList& g) {
    Tensor gx = new_empty_preserving(g[0].shape(), g[0]);
    backends::unary_backward(g[0], kop, x_s, y_s, g[0], gx, scalars);
    return TensorList{gx};
  });
  return out;
}

Tensor compare_op(CompareOp op, const char* name, const Tensor& a, const Tensor& b) {
  check_defined(name, a, "first input");
  check_defined(name, b, "second input");
  check_same_device(name, a, b);
  const DType dt = promote_types(a.dtype(), b.dtype());
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  NoGradGuard no_grad;
  Tensor out = new_empty(shape, a, kBool);
  backends::compare(a, op, broadcast_for_kernel(cast_if_needed(a, dt), shape),
                         broadcast_for_kernel(cast_if_needed(b, dt), shape), out);
  return out;
}

}  // namespace

#define MT_BINARY_FN(code, name, ...) \
  Tensor name(const Tensor& a, const Tensor& b) { return binary_op(OpId::name, BinaryOp::code, a, b); }
MT_BINARY_OPS(MT_BINARY_FN)
#undef MT_BINARY_FN

Tensor add(const Tensor& a, double b) { return scalar_op(OpId::add, BinaryOp::Add, a, b, false); }
Tensor sub(const Tensor& a, double b) { return scalar_op(OpId::sub, BinaryOp::Sub, a, b, false); }
Tensor rsub(const Tensor& a, double b) { return scalar_op(OpId::sub, BinaryOp::Sub, a, b, true); }
Tensor mul(const Tensor& a, double b) { return scalar_op(OpId::mul, BinaryOp::Mul, a, b, false); }
Tensor div(const Tensor& a, double b) { return scalar_op(OpId::div, BinaryOp::Div, a, b, false); }
Tensor rdiv(const Tensor& a, double b) { return scalar_op(OpId::div, BinaryOp::Div, a, b, true); }
Tensor pow(const Tensor& a, double exponent) { return unary_op(OpId::pow, UnaryOp::Pow, a, exponent); }

#define MT_PLAIN_UNARY(code, name) \
  Tensor name(const Tensor& x) { return unary_op(OpId::name, UnaryOp::code, x); }
MT_FOR_PLAIN_UNARY_OPS
#undef MT_PLAIN_UNARY
#define MT_SCALARS_UNARY(code, name, first, first_default, second, second_default) \
  Tensor name(const Tensor& x, double first, double second) {                     \
    return unary_op(OpId::name, UnaryOp::code, x, {first, second});               \
  }
MT_UNARY_SCALARS(MT_SCALARS_UNARY)
#undef MT_SCALARS_UNARY

// ---- clamp -----------------------------------------------------------------------------------------

namespace {
// The dtype of x beside a number, as PyTorch's result_type: a floating number makes an integer
// tensor float32, an integral one keeps the tensor's dtype.
DType with_scalar(DType dt, const std::optional<Scalar>& s) {
  if (!s) return dt;
  if (s->isFloatingPoint() && !is_floating(dt)) return kFloat32;
  if (!s->isBoolean() && dt == kBool) return kInt64;
  return dt;
}

// Integers have no clamp kernel and no gradient: compare and pick, exact in their own dtype.
Tensor clamp_integers(const Tensor& x, const std::optional<Tensor>& lo, const std::optional<Tensor>& hi) {
  NoGradGuard no_grad;
  Tensor y = x;
  if (lo) y = where(lt(y, *lo), *lo, y);
  if (hi) y = where(gt(y, *hi), *hi, y);
  return y;
}
}  // namespace

Tensor clamp(const Tensor& x_in, std::optional<Scalar> min, std::optional<Scalar> max) {
  Tensor x = x_in;
  OpScope scope(OpId::clamp, {&x});
  check_defined("clamp", x, "input");
  MT_CHECK(min || max, "clamp: at least one of min and max must be given");
  MT_CHECK(x.dtype() != kBool, "clamp: bool tensors are not supported, got ", describe(x));
  const DType dt = with_scalar(with_scalar(x.dtype(), min), max);
  x = cast_if_needed(x, dt);
  if (!is_floating(dt)) {
    auto bound = [&](const std::optional<Scalar>& s) {
      return s ? std::optional<Tensor>(full({}, s->toDouble(), TensorOptions(dt).device(x.device()))) : std::nullopt;
    };
    return clamp_integers(x, bound(min), bound(max));
  }
  // One bound: clamp_min or clamp_max (offered to autocast once, as clamp, above).
  if (!max) return unary_op(OpId::clamp_min, UnaryOp::ClampMin, x, min->toDouble());
  if (!min) return unary_op(OpId::clamp_max, UnaryOp::ClampMax, x, max->toDouble());
  // Both bounds: two passes, one node. The gradient passes where min < x < max, which is the
  // clamp_max gradient of the clamp_min gradient, both read at x (where clamp_min changed x,
  // its own gradient is already 0); min > max gives max everywhere and no gradient, as PyTorch.
  const double lo = min->toDouble(), hi = max->toDouble();
  Tensor out = new_empty_preserving(x.shape(), x);
  backends::unary(x, UnaryOp::ClampMin, x, out, lo);
  backends::unary(x, UnaryOp::ClampMax, out, out, hi);
  if (autograd::needs_grad({&x})) {
    const autograd::SavedTensor x_s = autograd::saved(x, "input 0");
    autograd::record("ClampBackward0", out, {&x}, [x_s, lo, hi](const TensorList& g) {
      Tensor upper = new_empty_preserving(g[0].shape(), g[0]);
      backends::unary_backward(g[0], UnaryOp::ClampMax, x_s, Tensor(), g[0], upper, hi);
      Tensor gx = new_empty_preserving(g[0].shape(), g[0]);
      backends::unary_backward(g[0], UnaryOp::ClampMin, x_s, Tensor(), upper, gx, lo);
      return TensorList{gx};
    });
  }
  return out;
}

Tensor clamp(const Tensor& x_in, const std::optional<Tensor>& min_in, const std::optional<Tensor>& max_in) {
  Tensor x = x_in, lo = min_in.value_or(Tensor()), hi = max_in.value_or(Tensor());
  OpScope scope(OpId::clamp, {&x, &lo, &hi});
  check_defined("clamp", x, "input");
  MT_CHECK(lo.defined() || hi.defined(), "clamp: at least one of min and max must be given");
  MT_CHECK(x.dtype() != kBool, "clamp: bool tensors are not supported, got ", describe(x));
  DType dt = x.dtype();
  for (const Tensor* b : {&lo, &hi}) {
    if (!b->defined()) continue;
    check_same_device("clamp", x, *b);
    dt = promote_types(dt, b->dtype());
  }
  x = cast_if_needed(x, dt);
  const std::optional<Tensor> l = lo.defined() ? std::optional<Tensor>(cast_if_needed(lo, dt)) : std::nullopt;
  const std::optional<Tensor> h = hi.defined() ? std::optional<Tensor>(cast_if_needed(hi, dt)) : std::nullopt;
  if (!is_floating(dt)) return clamp_integers(x, l, h);
  // maximum / minimum: the gradient to whichever won, split evenly on ties, as PyTorch's clamp
  // with tensor bounds.
  Tensor y = l ? maximum(x, *l) : x;
  return h ? minimum(y, *h) : y;
}

namespace {
Tensor clamp_bound(OpId id, UnaryOp kop, const Tensor& x_in, const Scalar& bound) {
  Tensor x = x_in;
  OpScope scope(id, {&x});
  const char* name = op_name(id);
  check_defined(name, x, "input");
  MT_CHECK(x.dtype() != kBool, name, ": bool tensors are not supported, got ", describe(x));
  const DType dt = with_scalar(x.dtype(), bound);
  x = cast_if_needed(x, dt);
  if (is_floating(dt)) return unary_op(id, kop, x, bound.toDouble());
  const Tensor b = full({}, bound.toDouble(), TensorOptions(dt).device(x.device()));
  return kop == UnaryOp::ClampMin ? clamp_integers(x, b, std::nullopt) : clamp_integers(x, std::nullopt, b);
}
}  // namespace

Tensor clamp_min(const Tensor& x, const Scalar& min) { return clamp_bound(OpId::clamp_min, UnaryOp::ClampMin, x, min); }
Tensor clamp_max(const Tensor& x, const Scalar& max) { return clamp_bound(OpId::clamp_max, UnaryOp::ClampMax, x, max); }

Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const { return mixtrain::clamp(*this, min, max); }
Tensor Tensor::clamp(const std::optional<Tensor>& min, const std::optional<Tensor>& max) const {
  return mixtrain::clamp(*this, min, max);
}
Tensor Tensor::clamp_min(const Scalar& min) const { return mixtrain::clamp_min(*this, min); }
Tensor Tensor::clamp_max(const Scalar& max) const { return mixtrain::clamp_max(*this, max); }
Tensor Tensor::clamp_min(const Tensor& min) const { return mixtrain::clamp(*this, std::optional<Tensor>(min), std::nullopt); }
Tensor Tensor::clamp_max(const Tensor& max) const { return mixtrain::clamp(*this, std::nullopt, std::optional<Tensor>(max)); }

Tensor addcmul(const Tensor& self_in, const Tensor& t1_in, const Tensor& t2_in, double value) {
  Tensor self = self_in, t1 = t1_in, t2 = t2_in;
  OpScope scope(OpId::addcmul, {&self, &t1, &t2});
  check_defined("addcmul", self, "self");
  check_defined("addcmul", t1, "tensor1");
  check_defined("addcmul", t2, "tensor2");
  check_same_device("addcmul", self, t1);
  check_same_device("addcmul", self, t2);
  MT_CHECK(is_floating(self.dtype()) && is_floating(t1.dtype()) && is_floating(t2.dtype()),
           "addcmul: expected floating tensors, got ", describe(self), ", ", describe(t1), " and ", describe(t2));
  const DType out = promote_types(promote_types(self.dtype(), t1.dtype()), t2.dtype());
  // A composite of mul and add; for half results it runs in fp32 so the value is rounded once,
  // like PyTorch's fused kernel, instead of after every step.
  const DType compute = is_half(out) ? kFloat32 : out;
  Tensor prod = mul(cast_if_needed(t1, compute), cast_if_needed(t2, compute));
  if (value != 1.0) prod = mul(prod, value);
  return cast_if_needed(add(cast_if_needed(self, compute), prod), out);
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Eq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Ne, "ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Lt, "lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Le, "le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Gt, "gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare_op(CompareOp::Ge, "ge", a, b); }

Tensor where(const Tensor& cond_in, const Tensor& a_in, const Tensor& b_in) {
  Tensor cond = cond_in, a = a_in, b = b_in;
  OpScope scope(OpId::where, {&a, &b});
  check_defined("where", cond, "condition");
  MT_CHECK(cond.dtype() == kBool, "where: condition must be bool, got ", describe(cond));
  check_same_device("where", cond, a);
  Promoted p = promote("where", a, b, /*floating=*/false);
  const Shape shape = broadcast_shapes(cond.shape(), p.shape, "where");
  Tensor out = new_empty_preserving(shape, p.a);
  backends::where(out, broadcast_for_kernel(cond, shape), broadcast_for_kernel(p.a, shape),
                         broadcast_for_kernel(p.b, shape), out);
  if (is_floating(out.dtype()) && autograd::needs_grad({&p.a, &p.b})) {
    const Shape sa = p.a.shape(), sb = p.b.shape();
    const bool ga = p.a.requires_grad(), gb = p.b.requires_grad();
    const autograd::SavedTensor c = autograd::saved(cond, "input 0 (condition)");
    autograd::record("WhereBackward0", {&out}, {&p.a, &p.b}, [c, sa, sb, ga, gb](const TensorList& g) {
      Tensor zero = zeros({}, g[0].options());
      return TensorList{ga ? sum_to(where(c, g[0], zero), sa) : Tensor(), gb ? sum_to(where(c, zero, g[0]), sb) : Tensor()};
    });
  }
  return out;
}

// ---- masked_fill ----------------------------------------------------------------------------------

namespace {
Tensor masked_fill_impl(const Tensor& x_in, const Tensor& mask, const Tensor& value_in) {
  const char* op = "masked_fill";
  Tensor x = x_in, value = value_in;
  OpScope scope(OpId::masked_fill, {&x, &value});
  check_defined(op, x, "input");
  check_defined(op, mask, "mask");
  check_defined(op, value, "value");
  MT_CHECK(mask.dtype() == kBool, op, ": mask must be bool, got ", describe(mask));
  check_same_device(op, x, mask);
  MT_CHECK(value.dim() == 0, op, ": value must be a 0-dimensional tensor, got ", describe(value));
  MT_CHECK(broadcast_shapes(x.shape(), mask.shape(), op) == x.shape(), op, ": mask ", describe(mask),
           " does not broadcast to the input's shape ", describe(x));
  // The value takes x's dtype (masked_fill never changes it); a CPU 0-d value may fill a CUDA x.
  const Tensor v = value.dtype() == x.dtype() && value.device() == x.device() ? value : value.to(x.device(), x.dtype());
  Tensor out = new_empty_preserving(x.shape(), x);
  backends::where(out, broadcast_for_kernel(mask, x.shape()), broadcast_for_kernel(v, x.shape()), x, out);
  if (is_floating(x.dtype()) && autograd::needs_grad({&x, &v})) {
    const bool gx = x.requires_grad(), gv = v.requires_grad();
    const autograd::SavedTensor m = autograd::saved(mask, "input 1 (mask)");
    autograd::record("MaskedFillBackward0", {&out}, {&x, &v}, [m, gx, gv](const TensorList& g) {
      const Tensor zero = zeros({}, g[0].options());
      return TensorList{gx ? where(m, zero, g[0]) : Tensor(), gv ? sum(where(m, g[0], zero)) : Tensor()};
    });
  }
  return out;
}
}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value) { return masked_fill_impl(x, mask, value); }

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  ops::check_defined("masked_fill", x, "input");
  return masked_fill_impl(x, mask, scalar_tensor(value.toDouble(), TensorOptions(x.dtype()).device(x.device())));
}

Tensor Tensor::masked_fill(const Tensor& mask, const Scalar& value) const { return mixtrain::masked_fill(*this, mask, value); }
Tensor Tensor::masked_fill(const Tensor& mask, const Tensor& value) const { return mixtrain::masked_fill(*this, mask, value); }

namespace {
// `self op= other`, other broadcast to self's shape and cast to its dtype.
Tensor& binary_inplace(const char* name, BinaryOp op, Tensor& self, const Tensor& other) {
  check_inplace(name, self);
  check_same_device(name, self, other);
  const Tensor o = other.dtype() == self.dtype() ? other : other.to(self.dtype());
  backends::binary(self, op, self, broadcast_for_kernel(o, self.shape()), self);
  self.bump_version();
  return self;
}
}  // namespace

Tensor& Tensor::mul_(double value) {
  check_inplace("mul_", *this);
  backends::binary_scalar(*this, BinaryOp::Mul, *this, value, false, *this);
  bump_version();
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) { return binary_inplace("mul_", BinaryOp::Mul, *this, other); }

// Computed out of place and copied in: copy_ refuses what autograd needs untouched.
Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) {
  check_inplace("clamp_", *this);
  Tensor r;
  {
    NoGradGuard no_grad;
    r = mixtrain::clamp(detach(), min, max);
  }
  MT_CHECK(r.dtype() == dtype(), "clamp_: the result type ", r.dtype(), " cannot be written into ", describe(*this));
  return copy_(r);
}

Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& value) {
  check_inplace("masked_fill_", *this);
  Tensor r;
  {
    NoGradGuard no_grad;
    r = mixtrain::masked_fill(detach(), mask, value);
  }
  return copy_(r);
}

}  // namespace mixtrain
