// The copies of the vector kernels (unary_vector.h, norm_vector.h) for this CPU, as cpu_isa()
// chose them.
#include "backends/cpu/cpu_isa.h"
#include "kernels/cpu/norm_vector.h"
#include "kernels/cpu/unary_vector.h"
#include "mixtrain/base/error.h"

namespace mixtrain::backends::cpu {

namespace {

#define MT_UNARY_VECTOR_CALL(fn, ...)                          \
  switch (cpu_isa()) {                                         \
    MT_VECTOR_AVX512(case CpuIsa::Avx512: return vec_avx512::fn(__VA_ARGS__);) \
    MT_VECTOR_AVX2(case CpuIsa::Avx2: return vec_avx2::fn(__VA_ARGS__);)       \
    default: return vec_generic::fn(__VA_ARGS__);              \
  }
#if defined(MT_GEMM_HAVE_AVX512)
#define MT_VECTOR_AVX512(...) __VA_ARGS__
#else
#define MT_VECTOR_AVX512(...)
#endif
#if defined(MT_GEMM_HAVE_AVX2)
#define MT_VECTOR_AVX2(...) __VA_ARGS__
#else
#define MT_VECTOR_AVX2(...)
#endif

void gelu_forward(float* y, int64_t n, const float* x) { MT_UNARY_VECTOR_CALL(gelu_forward, y, n, x) }
void gelu_backward(float* grad_x, int64_t n, const float* x, const float* grad_y) {
  MT_UNARY_VECTOR_CALL(gelu_backward, grad_x, n, x, grad_y)
}

}  // namespace

std::vector<UnaryVectorCopy> unary_vector_copies() {
  std::vector<UnaryVectorCopy> copies{{"generic", vec_generic::gelu_forward, vec_generic::gelu_backward}};
  const CpuIsa isa = cpu_isa();
  (void)isa;
  MT_VECTOR_AVX2(if (isa != CpuIsa::Generic) copies.push_back({"avx2", vec_avx2::gelu_forward, vec_avx2::gelu_backward});)
  MT_VECTOR_AVX512(if (isa == CpuIsa::Avx512) copies.push_back({"avx512", vec_avx512::gelu_forward, vec_avx512::gelu_backward});)
  return copies;
}

std::vector<NormVectorCopy> norm_vector_copies() {
  std::vector<NormVectorCopy> copies{{"generic", vec_generic::layer_norm_row, vec_generic::layer_norm_row_backward}};
  const CpuIsa isa = cpu_isa();
  (void)isa;
  MT_VECTOR_AVX2(if (isa != CpuIsa::Generic) copies.push_back({"avx2", vec_avx2::layer_norm_row, vec_avx2::layer_norm_row_backward});)
  MT_VECTOR_AVX512(if (isa == CpuIsa::Avx512) copies.push_back({"avx512", vec_avx512::layer_norm_row, vec_avx512::layer_norm_row_backward});)
  return copies;
}

NormVectorCopy norm_vector() {
  static const NormVectorCopy chosen = norm_vector_copies().back();  // the widest this CPU runs
  return chosen;
}

void unary_vector_forward(UnaryOp op, float* y, int64_t n, const float* x) {
  MT_CHECK(has_unary_vector(op), "unary: no vector kernel for op ", static_cast<int>(op));
  gelu_forward(y, n, x);
}

void unary_vector_backward(UnaryOp op, float* grad_x, int64_t n, const float* x, const float* grad_y) {
  MT_CHECK(has_unary_vector(op), "unary_backward: no vector kernel for op ", static_cast<int>(op));
  gelu_backward(grad_x, n, x, grad_y);
}

}  // namespace mixtrain::backends::cpu
