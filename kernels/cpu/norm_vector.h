#pragma once
// Layer norm's rows over plain fp32 arrays, compiled once per instruction set like the vector
// unary kernels (unary_vector.h, cpu_isa.h): the portable build's loops over doubles run one or
// two lanes, and layer norm was 7 % of a small transformer's step (docs/CPU.md). The statistics
// and the affine gradients are summed in double as norm.cpp's generic rows sum them (the forward
// in the same eight lanes, so its mean and 1/std keep their bits); the normalized output is fp32.
#include <cstdint>
#include <vector>

namespace mixtrain::backends::cpu {

#define MT_DECLARE_NORM_VECTOR_COPY(isa)                                                              \
  namespace isa {                                                                                     \
  void layer_norm_row(float* y, int64_t n, const float* x, const float* weight, const float* bias,    \
                      double eps, double* mean, double* rstd);                                        \
  void layer_norm_row_backward(float* grad_x, int64_t n, const float* x, const float* grad_y,         \
                               const float* weight, double mean, double rstd, double* grad_weight,    \
                               double* grad_bias);                                                    \
  }
MT_DECLARE_NORM_VECTOR_COPY(vec_generic)
MT_DECLARE_NORM_VECTOR_COPY(vec_avx2)
MT_DECLARE_NORM_VECTOR_COPY(vec_avx512)
#undef MT_DECLARE_NORM_VECTOR_COPY

// One row x[0, n) of layer norm: y = (x - mean) * rstd * weight + bias, mean and rstd = 1 /
// sqrt(var + eps) returned. weight and bias hold n values (ones and zeros when the op has none).
using LayerNormRowFn = void (*)(float*, int64_t, const float*, const float*, const float*, double, double*, double*);
// Its backward: grad_x (skipped when null), and dy * xhat and dy added into grad_weight and
// grad_bias (n doubles each, a thread's partial sums).
using LayerNormRowBackwardFn = void (*)(float*, int64_t, const float*, const float*, const float*, double, double,
                                        double*, double*);

// The copies built into this library that this CPU can run (tests compare each with fp64).
struct NormVectorCopy {
  const char* isa;
  LayerNormRowFn forward;
  LayerNormRowBackwardFn backward;
};
std::vector<NormVectorCopy> norm_vector_copies();

// The copy this CPU runs.
NormVectorCopy norm_vector();

}  // namespace mixtrain::backends::cpu
