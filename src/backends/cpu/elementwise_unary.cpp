// Unary elementwise kernels and their derivatives, the larger half of the family's instantiations
// (every unary op in every floating dtype, twice): in a file of their own so that the family
// compiles on two cores at once. elementwise.cpp has the rest and registers these. GELU on fp32
// compute runs on the vector kernels of unary_vector.h where a run is contiguous.
#include "backends/elementwise.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "kernels/cpu/unary_vector.h"
#include "backends/elementwise_math.h"
#include "backends/op_switch.h"

namespace mixtrain::backends::cpu {

using math::Unary;

void unary(UnaryOp op, const Tensor& x, const Tensor& out, UnaryScalars s) {
  dispatch_floating(x.dtype(), unary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const A a = static_cast<A>(s.alpha), b = static_cast<A>(s.beta);
    with_unary(op, [&](auto k) {
      constexpr UnaryOp code = decltype(k)::value;
      auto f = [a, b](A v) { return Unary<code>::forward(v, a, b); };
      if constexpr (std::is_same_v<A, float> && has_unary_vector(code)) {
        auto block = [](float* y, int64_t m, const float* xv) { unary_vector_forward(code, y, m, xv); };
        map_elementwise_blocks<T, T>(out, f, block, x);
      } else {
        map_elementwise<T, T>(out, f, x);
      }
    });
  });
}

void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& grad_y,
                                const Tensor& grad_x, UnaryScalars s) {
  // x or y may be undefined when the formula does not read it; substitute grad_y (same shape).
  const Tensor& xs = x.defined() ? x : grad_y;
  const Tensor& ys = y.defined() ? y : grad_y;
  dispatch_floating(grad_y.dtype(), unary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const A a = static_cast<A>(s.alpha), b = static_cast<A>(s.beta);
    with_unary(op, [&](auto k) {
      constexpr UnaryOp code = decltype(k)::value;
      auto f = [a, b](A xv, A yv, A g) { return Unary<code>::backward(xv, yv, g, a, b); };
      if constexpr (std::is_same_v<A, float> && has_unary_vector(code)) {
        auto block = [](float* gx, int64_t m, const float* xv, const float*, const float* g) {
          unary_vector_backward(code, gx, m, xv, g);
        };
        map_elementwise_blocks<T, T, T, T>(grad_x, f, block, xs, ys, grad_y);
      } else {
        map_elementwise<T, T, T, T>(grad_x, f, xs, ys, grad_y);
      }
    });
  });
}

void register_elementwise_unary() {
  backends::unary.set(DeviceType::CPU, unary);
  backends::unary_backward.set(DeviceType::CPU, unary_backward);
}

}  // namespace mixtrain::backends::cpu
