// Elementwise kernels: unary ops and their derivatives, binary arithmetic, comparisons, where. The
// formulas are the shared ones of backends/elementwise_math.h (the CPU backend runs the same), in
// fp32 for half inputs and rounded once.
#include "kernels/cuda/elementwise.h"
#include "backends/elementwise_math.h"
#include "backends/op_switch.h"
#include "elementwise_loops.cuh"

namespace mixtrain::kernels {

namespace math = backends::math;
using backends::BinaryOp;
using backends::CompareOp;
using backends::UnaryOp;
using backends::with_binary;
using backends::with_compare;
using backends::with_unary;

namespace {

// Thin functors over the shared formulas (backends/elementwise_math.h): launch_map wants objects.
template <class A, UnaryOp Op>
struct UnaryFn {
  A alpha, beta;
  __device__ __forceinline__ A operator()(A x) const { return math::Unary<Op>::forward(x, alpha, beta); }
};

template <class A, UnaryOp Op>
struct UnaryBackwardFn {
  A alpha, beta;
  __device__ __forceinline__ A operator()(A x, A y, A g) const {
    return math::Unary<Op>::backward(x, y, g, alpha, beta);
  }
};

template <class A, BinaryOp Op>
struct BinaryFn {
  __device__ __forceinline__ A operator()(A a, A b) const { return math::Binary<Op>::apply(a, b); }
};

template <class A, BinaryOp Op, bool ScalarFirst>
struct BinaryScalarFn {
  A s;
  __device__ __forceinline__ A operator()(A a) const {
    return ScalarFirst ? math::Binary<Op>::apply(s, a) : math::Binary<Op>::apply(a, s);
  }
};

template <class A, CompareOp Op>
struct CompareFn {
  __device__ __forceinline__ bool operator()(A a, A b) const { return math::Compare<Op>::apply(a, b); }
};

template <class A>
struct WhereFn {
  __device__ __forceinline__ A operator()(bool c, A a, A b) const { return c ? a : b; }
};

}  // namespace

void unary(UnaryOp op, DType dtype, const ElemIter<2>& it, backends::UnaryScalars s, cudaStream_t stream) {
  dispatch_floating(dtype, backends::unary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    with_unary(op, [&](auto k) {
      const UnaryFn<A, decltype(k)::value> fn{static_cast<A>(s.alpha), static_cast<A>(s.beta)};
      launch_map<T, T>(it, fn, stream, backends::unary_op_name(op));
    });
  });
}

void unary_backward(UnaryOp op, DType dtype, const ElemIter<4>& it, backends::UnaryScalars s, cudaStream_t stream) {
  dispatch_floating(dtype, backends::unary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    with_unary(op, [&](auto k) {
      const UnaryBackwardFn<A, decltype(k)::value> fn{static_cast<A>(s.alpha), static_cast<A>(s.beta)};
      launch_map<T, T, T, T>(it, fn, stream, "unary_backward");
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
