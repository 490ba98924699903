// Elementwise kernels: binary arithmetic, comparisons, where (the unary ops are in
// elementwise_unary.cpp). The formulas are the shared ones of backends/elementwise_math.h; this
// file runs them over strided tensors.
#include "backends/elementwise.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/elementwise_math.h"
#include "backends/op_switch.h"

namespace mixtrain::backends::cpu {

using math::Binary;
using math::Compare;

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

void register_elementwise_unary();  // elementwise_unary.cpp

void register_elementwise() {
  register_elementwise_unary();
  backends::binary.set(DeviceType::CPU, binary);
  backends::binary_scalar.set(DeviceType::CPU, binary_scalar);
  backends::compare.set(DeviceType::CPU, compare);
  backends::where.set(DeviceType::CPU, where);
}

}  // namespace mixtrain::backends::cpu
