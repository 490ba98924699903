// Elementwise kernels: unary math and its derivatives, binary arithmetic, comparisons, where. The
// formulas are the shared ones of backends/elementwise_math.h; this file runs them over strided
// tensors.
#include "backends/elementwise.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/elementwise_math.h"
#include "backends/op_switch.h"

namespace mixtrain::backends::cpu {

using math::Binary;
using math::Compare;
using math::Unary;

void unary(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  dispatch_floating(x.dtype(), unary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const A a = static_cast<A>(alpha);
    with_unary(op, [&](auto k) {
      map_elementwise<T, T>(out, [a](A v) { return Unary<decltype(k)::value>::forward(v, a); }, x);
    });
  });
}

void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& grad_y,
                                const Tensor& grad_x, double alpha) {
  // x or y may be undefined when the formula does not read it; substitute grad_y (same shape).
  const Tensor& xs = x.defined() ? x : grad_y;
  const Tensor& ys = y.defined() ? y : grad_y;
  dispatch_floating(grad_y.dtype(), unary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const A a = static_cast<A>(alpha);
    with_unary(op, [&](auto k) {
      map_elementwise<T, T, T, T>(
          grad_x, [a](A xv, A yv, A g) { return Unary<decltype(k)::value>::backward(xv, yv, g, a); }, xs, ys,
          grad_y);
    });
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_floating(out.dtype(), binary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    with_binary(op, [&](auto k) {
      map_elementwise<T, T, T>(out, [](A u, A v) { return Binary<decltype(k)::value>::apply(u, v); }, a, b);
    });
  });
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out) {
  dispatch_floating(out.dtype(), binary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const A sv = static_cast<A>(s);
    with_binary(op, [&](auto k) {
      if (scalar_first)
        map_elementwise<T, T>(out, [sv](A u) { return Binary<decltype(k)::value>::apply(sv, u); }, a);
      else
        map_elementwise<T, T>(out, [sv](A u) { return Binary<decltype(k)::value>::apply(u, sv); }, a);
    });
  });
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_all(a.dtype(), "compare", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    with_compare(op, [&](auto k) {
      map_elementwise<bool, T, T>(out, [](A u, A v) { return Compare<decltype(k)::value>::apply(u, v); }, a, b);
    });
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_all(out.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    map_elementwise<T, bool, T, T>(out, [](bool c, A u, A v) { return c ? u : v; }, cond, a, b);
  });
}

void register_elementwise() {
  backends::unary.set(DeviceType::CPU, unary);
  backends::unary_backward.set(DeviceType::CPU, unary_backward);
  backends::binary.set(DeviceType::CPU, binary);
  backends::binary_scalar.set(DeviceType::CPU, binary_scalar);
  backends::compare.set(DeviceType::CPU, compare);
  backends::where.set(DeviceType::CPU, where);
}

}  // namespace mixtrain::backends::cpu
