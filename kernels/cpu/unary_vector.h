#pragma once
// Unary kernels over plain fp32 arrays that the compiler vectorizes, compiled once per instruction
// set like the matrix product (cpu_isa.h, cmake/MixtrainCpuDispatch.cmake): the portable build's
// SSE2 cannot blend, so the clamps inside the vectorizable erf and exp (elementwise_math.h) keep
// its loops scalar, while the AVX2 and AVX-512 copies run 8 and 16 lanes. The formulas are
// elementwise_math.h's rows, so every copy computes what the generic loops compute (up to fused
// multiply-adds). Only GELU has one: it was a fifth of a bf16 transformer step (docs/CPU.md).
#include <cstdint>
#include <vector>

#include "backends/kernel_types.h"

namespace mixtrain::backends::cpu {

#define MT_DECLARE_UNARY_VECTOR_COPY(isa)                                                  \
  namespace isa {                                                                          \
  void gelu_forward(float* y, int64_t n, const float* x);                                  \
  void gelu_backward(float* grad_x, int64_t n, const float* x, const float* grad_y);       \
  }
MT_DECLARE_UNARY_VECTOR_COPY(vec_generic)
MT_DECLARE_UNARY_VECTOR_COPY(vec_avx2)
MT_DECLARE_UNARY_VECTOR_COPY(vec_avx512)
#undef MT_DECLARE_UNARY_VECTOR_COPY

// Whether op has vector kernels here (fp32 compute: fp32, fp16 and bf16 tensors).
constexpr bool has_unary_vector(UnaryOp op) { return op == UnaryOp::Gelu; }

// The copies built into this library that this CPU can run (tests compare each with fp64).
struct UnaryVectorCopy {
  const char* isa;
  void (*gelu_forward)(float*, int64_t, const float*);
  void (*gelu_backward)(float*, int64_t, const float*, const float*);
};
std::vector<UnaryVectorCopy> unary_vector_copies();

// The kernels of the copy this CPU runs.
void unary_vector_forward(UnaryOp op, float* y, int64_t n, const float* x);
void unary_vector_backward(UnaryOp op, float* grad_x, int64_t n, const float* x, const float* grad_y);

}  // namespace mixtrain::backends::cpu
