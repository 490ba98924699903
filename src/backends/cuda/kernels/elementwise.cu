// Elementwise math: unary ops and their derivatives, binary arithmetic, comparisons, where. Each
// op is one case of a functor here; the formulas mirror the CPU backend's (elementwise.cpp), in
// fp32 for half inputs and rounded once.
#include "backends/op_switch.h"
#include "elementwise_loops.cuh"

namespace mixtrain::kernels {

using backends::BinaryOp;
using backends::CompareOp;
using backends::UnaryOp;
using backends::with_binary;
using backends::with_compare;
using backends::with_unary;

namespace {

template <class A> __device__ __forceinline__ A gelu_cdf(A x) { return A(0.5) * (A(1) + m_erf(x * A(0.70710678118654752440))); }
template <class A> __device__ __forceinline__ A gelu_pdf(A x) { return A(0.39894228040143267794) * m_exp(A(-0.5) * x * x); }

template <class A, UnaryOp Op>
struct UnaryFn {
  A alpha;
  __device__ __forceinline__ A operator()(A x) const {
    if constexpr (Op == UnaryOp::Neg) return -x;
    if constexpr (Op == UnaryOp::Exp) return m_exp(x);
    if constexpr (Op == UnaryOp::Log) return m_log(x);
    if constexpr (Op == UnaryOp::Sqrt) return m_sqrt(x);
    if constexpr (Op == UnaryOp::Rsqrt) return A(1) / m_sqrt(x);
    if constexpr (Op == UnaryOp::Tanh) return m_tanh(x);
    if constexpr (Op == UnaryOp::Sigmoid) return A(1) / (A(1) + m_exp(-x));
    if constexpr (Op == UnaryOp::Relu) return x <= A(0) ? A(0) : x;  // NaN stays NaN
    if constexpr (Op == UnaryOp::Gelu) return x * gelu_cdf(x);
    if constexpr (Op == UnaryOp::Abs) return m_abs(x);
    if constexpr (Op == UnaryOp::Pow) return m_pow(x, alpha);
    if constexpr (Op == UnaryOp::Square) return x * x;
    return x;
  }
};

// grad_x from the forward's input x, output y and grad_y.
template <class A, UnaryOp Op>
struct UnaryBackwardFn {
  A alpha;
  __device__ __forceinline__ A operator()(A x, A y, A g) const {
    if constexpr (Op == UnaryOp::Neg) return -g;
    if constexpr (Op == UnaryOp::Exp) return g * y;
    if constexpr (Op == UnaryOp::Log) return g / x;
    if constexpr (Op == UnaryOp::Sqrt) return g / (A(2) * y);
    if constexpr (Op == UnaryOp::Rsqrt) return A(-0.5) * g * y * y * y;
    if constexpr (Op == UnaryOp::Tanh) return g * (A(1) - y * y);
    if constexpr (Op == UnaryOp::Sigmoid) return g * y * (A(1) - y);
    if constexpr (Op == UnaryOp::Relu) return x > A(0) ? g : A(0);
    if constexpr (Op == UnaryOp::Gelu) return g * (gelu_cdf(x) + x * gelu_pdf(x));
    if constexpr (Op == UnaryOp::Abs) return x > A(0) ? g : (x < A(0) ? -g : A(0));
    if constexpr (Op == UnaryOp::Pow) return alpha == A(0) ? A(0) : g * alpha * m_pow(x, alpha - A(1));
    if constexpr (Op == UnaryOp::Square) return A(2) * g * x;
    return g;
  }
};

template <class A, BinaryOp Op>
__device__ __forceinline__ A binary_op(A a, A b) {
  if constexpr (Op == BinaryOp::Add) return a + b;
  if constexpr (Op == BinaryOp::Sub) return a - b;
  if constexpr (Op == BinaryOp::Mul) return a * b;
  if constexpr (Op == BinaryOp::Div) return a / b;
  if constexpr (Op == BinaryOp::Pow) return m_pow(a, b);
  if constexpr (Op == BinaryOp::Maximum) return (a != a || a > b) ? a : b;  // NaN propagates
  if constexpr (Op == BinaryOp::Minimum) return (a != a || a < b) ? a : b;
  return a;
}

template <class A, BinaryOp Op>
struct BinaryFn {
  __device__ __forceinline__ A operator()(A a, A b) const { return binary_op<A, Op>(a, b); }
};

template <class A, BinaryOp Op, bool ScalarFirst>
struct BinaryScalarFn {
  A s;
  __device__ __forceinline__ A operator()(A a) const { return ScalarFirst ? binary_op<A, Op>(s, a) : binary_op<A, Op>(a, s); }
};

template <class A, CompareOp Op>
struct CompareFn {
  __device__ __forceinline__ bool operator()(A a, A b) const {
    if constexpr (Op == CompareOp::Eq) return a == b;
    if constexpr (Op == CompareOp::Ne) return a != b;
    if constexpr (Op == CompareOp::Lt) return a < b;
    if constexpr (Op == CompareOp::Le) return a <= b;
    if constexpr (Op == CompareOp::Gt) return a > b;
    return a >= b;
  }
};

template <class A>
struct WhereFn {
  __device__ __forceinline__ A operator()(bool c, A a, A b) const { return c ? a : b; }
};

}  // namespace

void unary(UnaryOp op, DType dtype, const ElemIter<2>& it, double alpha, cudaStream_t stream) {
  dispatch_floating(dtype, backends::unary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    with_unary(op, [&](auto k) {
      launch_map<T, T>(it, UnaryFn<A, decltype(k)::value>{static_cast<A>(alpha)}, stream, backends::unary_op_name(op));
    });
  });
}

void unary_backward(UnaryOp op, DType dtype, const ElemIter<4>& it, double alpha, cudaStream_t stream) {
  dispatch_floating(dtype, backends::unary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    with_unary(op, [&](auto k) {
      launch_map<T, T, T, T>(it, UnaryBackwardFn<A, decltype(k)::value>{static_cast<A>(alpha)}, stream,
                             "unary_backward");
    });
  });
}

void binary(BinaryOp op, DType dtype, const ElemIter<3>& it, cudaStream_t stream) {
  dispatch_floating(dtype, backends::binary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    with_binary(op, [&](auto k) { launch_map<T, T, T>(it, BinaryFn<A, decltype(k)::value>{}, stream, "binary"); });
  });
}

void binary_scalar(BinaryOp op, DType dtype, const ElemIter<2>& it, double s, bool scalar_first, cudaStream_t stream) {
  dispatch_floating(dtype, backends::binary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    with_binary(op, [&](auto k) {
      constexpr BinaryOp O = decltype(k)::value;
      if (scalar_first) launch_map<T, T>(it, BinaryScalarFn<A, O, true>{static_cast<A>(s)}, stream, "binary_scalar");
      else launch_map<T, T>(it, BinaryScalarFn<A, O, false>{static_cast<A>(s)}, stream, "binary_scalar");
    });
  });
}

void compare(CompareOp op, DType dtype, const ElemIter<3>& it, cudaStream_t stream) {
  dispatch_all(dtype, "compare", [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_compare(op, [&](auto k) {
      launch_map<bool, T, T>(it, CompareFn<acc_t<T>, decltype(k)::value>{}, stream, "compare");
    });
  });
}

void where(DType dtype, const ElemIter<4>& it, cudaStream_t stream) {
  dispatch_all(dtype, "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map<T, bool, T, T>(it, WhereFn<acc_t<T>>{}, stream, "where");
  });
}

}  // namespace mixtrain::kernels
