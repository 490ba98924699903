// One copy of the vector unary kernels (unary_vector.h). MT_VEC_ISA names the copy's namespace;
// the portable copy is this file as the library compiles it, the others are built with -march
// flags by cmake/MixtrainCpuDispatch.cmake.
#include "kernels/cpu/unary_vector.h"

#include "backends/elementwise_math.h"

#ifndef MT_VEC_ISA
#define MT_VEC_ISA vec_generic
#endif

namespace mixtrain::backends::cpu::MT_VEC_ISA {

using Gelu = math::Unary<UnaryOp::Gelu>;

void gelu_forward(float* __restrict y, int64_t n, const float* __restrict x) {
  for (int64_t i = 0; i < n; ++i) y[i] = Gelu::forward(x[i], 0.0f, 0.0f);
}

void gelu_backward(float* __restrict grad_x, int64_t n, const float* __restrict x, const float* __restrict grad_y) {
  for (int64_t i = 0; i < n; ++i) grad_x[i] = Gelu::backward(x[i], 0.0f, grad_y[i], 0.0f, 0.0f);
}

}  // namespace mixtrain::backends::cpu::MT_VEC_ISA
