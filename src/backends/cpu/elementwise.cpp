// Elementwise kernels: unary math and its derivatives, binary arithmetic, comparisons, where.
#include <cmath>

#include "backends/elementwise.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/op_switch.h"

namespace mixtrain::backends::cpu {

namespace {

template <class A>
A gelu_cdf(A x) { return A(0.5) * (A(1) + std::erf(x * A(0.70710678118654752440))); }
template <class A>
A gelu_pdf(A x) { return A(0.39894228040143267794) * std::exp(A(-0.5) * x * x); }

template <class A>
A apply_unary(UnaryOp op, A x, A alpha) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Rsqrt: return A(1) / std::sqrt(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Sigmoid: return A(1) / (A(1) + std::exp(-x));
    case UnaryOp::Relu: return relu_value(x);
    case UnaryOp::Gelu: return x * gelu_cdf(x);
    case UnaryOp::Abs: return std::abs(x);
    case UnaryOp::Pow: return std::pow(x, alpha);
    case UnaryOp::Square: return x * x;
  }
  return x;
}

// d op(x) / dx times g, from the forward's input x and output y.
template <class A>
A apply_unary_backward(UnaryOp op, A x, A y, A g, A alpha) {
  switch (op) {
    case UnaryOp::Neg: return -g;
    case UnaryOp::Exp: return g * y;
    case UnaryOp::Log: return g / x;
    case UnaryOp::Sqrt: return g / (A(2) * y);
    case UnaryOp::Rsqrt: return A(-0.5) * g * y * y * y;
    case UnaryOp::Tanh: return g * (A(1) - y * y);
    case UnaryOp::Sigmoid: return g * y * (A(1) - y);
    case UnaryOp::Relu: return x > A(0) ? g : A(0);
    case UnaryOp::Gelu: return g * (gelu_cdf(x) + x * gelu_pdf(x));
    case UnaryOp::Abs: return x > A(0) ? g : (x < A(0) ? -g : A(0));
    case UnaryOp::Pow: return alpha == A(0) ? A(0) : g * alpha * std::pow(x, alpha - A(1));
    case UnaryOp::Square: return A(2) * g * x;
  }
  return g;
}

template <class A>
A apply_binary(BinaryOp op, A a, A b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Pow: return std::pow(a, b);
    case BinaryOp::Maximum: return (a != a || a > b) ? a : b;  // NaN propagates
    case BinaryOp::Minimum: return (a != a || a < b) ? a : b;
  }
  return a;
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  dispatch_floating(x.dtype(), unary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const A a = static_cast<A>(alpha);
    with_unary(op, [&](auto k) {
      map_elementwise<T, T>(out, [a](A v) { return apply_unary<A>(decltype(k)::value, v, a); }, x);
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
          grad_x, [a](A xv, A yv, A g) { return apply_unary_backward<A>(decltype(k)::value, xv, yv, g, a); }, xs, ys,
          grad_y);
    });
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_floating(out.dtype(), binary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    with_binary(op, [&](auto k) {
      map_elementwise<T, T, T>(out, [](A u, A v) { return apply_binary<A>(decltype(k)::value, u, v); }, a, b);
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
        map_elementwise<T, T>(out, [sv](A u) { return apply_binary<A>(decltype(k)::value, sv, u); }, a);
      else
        map_elementwise<T, T>(out, [sv](A u) { return apply_binary<A>(decltype(k)::value, u, sv); }, a);
    });
  });
}

void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  dispatch_all(a.dtype(), "compare", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    switch (op) {
      case CompareOp::Eq: map_elementwise<bool, T, T>(out, [](A u, A v) { return u == v; }, a, b); break;
      case CompareOp::Ne: map_elementwise<bool, T, T>(out, [](A u, A v) { return u != v; }, a, b); break;
      case CompareOp::Lt: map_elementwise<bool, T, T>(out, [](A u, A v) { return u < v; }, a, b); break;
      case CompareOp::Le: map_elementwise<bool, T, T>(out, [](A u, A v) { return u <= v; }, a, b); break;
      case CompareOp::Gt: map_elementwise<bool, T, T>(out, [](A u, A v) { return u > v; }, a, b); break;
      case CompareOp::Ge: map_elementwise<bool, T, T>(out, [](A u, A v) { return u >= v; }, a, b); break;
    }
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
