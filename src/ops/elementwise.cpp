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

Promoted promote(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "first input");
  check_defined(op, b, "second input");
  check_same_device(op, a, b);
  MT_CHECK(is_floating(a.dtype()) || is_floating(b.dtype()), op, ": expected floating tensors, got ", describe(a),
           " and ", describe(b));
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
      autograd::record("AddBackward", {&out}, {&p.a, &p.b}, [sa, sb](const TensorList& g) {
        return TensorList{sum_to(g[0], sa), sum_to(g[0], sb)};
      });
      break;
    case BinaryOp::Sub:
      autograd::record("SubBackward", {&out}, {&p.a, &p.b}, [sa, sb, gb](const TensorList& g) {
        return TensorList{sum_to(g[0], sa), gb ? sum_to(neg(g[0]), sb) : Tensor()};
      });
      break;
    case BinaryOp::Mul: {
      const autograd::SavedTensor a_s = gb ? autograd::saved(p.a, "input 0") : autograd::SavedTensor(),
                                  b_s = ga ? autograd::saved(p.b, "input 1") : autograd::SavedTensor();
      autograd::record("MulBackward", {&out}, {&p.a, &p.b}, [a_s, b_s, sa, sb](const TensorList& g) {
        return TensorList{b_s.defined() ? sum_to(mul(g[0], b_s), sa) : Tensor(),
                          a_s.defined() ? sum_to(mul(g[0], a_s), sb) : Tensor()};
      });
      break;
    }
    case BinaryOp::Div: {
      const autograd::SavedTensor a_s = gb ? autograd::saved(p.a, "input 0") : autograd::SavedTensor(),
                                  b_s = autograd::saved(p.b, "input 1");
      autograd::record("DivBackward", {&out}, {&p.a, &p.b}, [a_s, b_s, sa, sb, ga](const TensorList& g) {
        return TensorList{ga ? sum_to(div(g[0], b_s), sa) : Tensor(),
                          a_s.defined() ? sum_to(neg(div(mul(g[0], a_s), mul(b_s, b_s))), sb) : Tensor()};
      });
      break;
    }
    case BinaryOp::Pow: {
      const autograd::SavedTensor a_s = autograd::saved(p.a, "input 0"), b_s = autograd::saved(p.b, "input 1"),
                                  o_s = autograd::saved(out, "output 0");
      autograd::record("PowBackward", {&out}, {&p.a, &p.b}, [a_s, b_s, o_s, sa, sb, ga, gb](const TensorList& g) {
        return TensorList{ga ? sum_to(mul(g[0], mul(b_s, pow(a_s, sub(b_s, 1.0)))), sa) : Tensor(),
                          gb ? sum_to(mul(g[0], mul(o_s, log(a_s))), sb) : Tensor()};
      });
      break;
    }
    case BinaryOp::Maximum:
    case BinaryOp::Minimum: {
      // The gradient goes to the input that was picked (to a on ties, as torch splits evenly; we
      // keep the simpler rule and document it).
      const autograd::SavedTensor a_s = autograd::saved(p.a, "input 0"), b_s = autograd::saved(p.b, "input 1");
      const bool is_max = kop == BinaryOp::Maximum;
      autograd::record(is_max ? "MaximumBackward" : "MinimumBackward", {&out}, {&p.a, &p.b},
                       [a_s, b_s, sa, sb, is_max](const TensorList& g) {
                         Tensor pick_a = is_max ? ge(a_s, b_s) : le(a_s, b_s);
                         Tensor zero = zeros({}, g[0].options());
                         return TensorList{sum_to(where(pick_a, g[0], zero), sa), sum_to(where(pick_a, zero, g[0]), sb)};
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
  autograd::record(name, out, {&a}, [kop, s, scalar_first, a_s, o_s](const TensorList& g) -> TensorList {
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

Tensor unary_op(OpId id, UnaryOp kop, const Tensor& x_in, double alpha = 0.0) {
  Tensor x = x_in;
  OpScope scope(id, {&x});
  const char* name = op_name(id);
  check_defined(name, x, "input");
  check_floating(name, x);
  Tensor out = new_empty_preserving(x.shape(), x);
  backends::unary(x, kop, x, out, alpha);
  if (!autograd::needs_grad({&x})) return out;
  const autograd::SavedTensor x_s = backends::unary_backward_reads_input(kop) ? autograd::saved(x, "input 0") : autograd::SavedTensor();
  const autograd::SavedTensor y_s = backends::unary_backward_reads_output(kop) ? autograd::saved(out, "output 0") : autograd::SavedTensor();
  autograd::record(name, out, {&x}, [kop, alpha, x_s, y_s](const TensorList& g) {
    Tensor gx = new_empty_preserving(g[0].shape(), g[0]);
    backends::unary_backward(g[0], kop, x_s, y_s, g[0], gx, alpha);
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

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(OpId::add, BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(OpId::sub, BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(OpId::mul, BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(OpId::div, BinaryOp::Div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_op(OpId::pow, BinaryOp::Pow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(OpId::maximum, BinaryOp::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(OpId::minimum, BinaryOp::Minimum, a, b); }

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
  Promoted p = promote("where", a, b);
  const Shape shape = broadcast_shapes(cond.shape(), p.shape, "where");
  Tensor out = new_empty_preserving(shape, p.a);
  backends::where(out, broadcast_for_kernel(cond, shape), broadcast_for_kernel(p.a, shape),
                         broadcast_for_kernel(p.b, shape), out);
  if (autograd::needs_grad({&p.a, &p.b})) {
    const Shape sa = p.a.shape(), sb = p.b.shape();
    const autograd::SavedTensor c = autograd::saved(cond, "input 0 (condition)");
    autograd::record("WhereBackward", {&out}, {&p.a, &p.b}, [c, sa, sb](const TensorList& g) {
      Tensor zero = zeros({}, g[0].options());
      return TensorList{sum_to(where(c, g[0], zero), sa), sum_to(where(c, zero, g[0]), sb)};
    });
  }
  return out;
}

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

}  // namespace mixtrain
