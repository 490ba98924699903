#pragma once
// The CPU backend's matrix product, C (= or +=) A * B on strided fp32/fp64 matrices, compiled
// more than once: a portable build also compiles gemm_eigen.cpp for AVX2+FMA and for AVX-512
// (cmake/MixtrainCpuDispatch.cmake), because Eigen picks its vector width when it is compiled,
// and gemm_product() runs the widest copy this CPU can execute. Each copy lives in its own
// namespace with its own Eigen (renamed by the build), so no code of one leaks into another.
// Only plain types cross this header: it is included by every copy.
#include <cstdint>

namespace mixtrain::backends::cpu {

// A [rows, cols] matrix at data: element (r, c) at data[r * row_stride + c * col_stride]; one of
// the strides is 1 (or the matrix is a row or a column).
template <class S>
struct GemmMatrix {
  const S* data;
  int64_t rows, cols, row_stride, col_stride;
};

// out is row-major [a.rows, b.cols] with leading dimension ldc; accumulate adds to it.
template <class S>
struct GemmCall {
  GemmMatrix<S> a, b;
  S* out;
  int64_t ldc;
  bool accumulate;
};

#define MT_DECLARE_GEMM_COPY(isa)           \
  namespace isa {                           \
  void gemm_product(const GemmCall<float>&);  \
  void gemm_product(const GemmCall<double>&); \
  }
MT_DECLARE_GEMM_COPY(gemm_generic)
MT_DECLARE_GEMM_COPY(gemm_avx2)
MT_DECLARE_GEMM_COPY(gemm_avx512)
#undef MT_DECLARE_GEMM_COPY

// The copy for this CPU (the widest it supports among those built; MIXTRAIN_CPU_ISA=generic|avx2
// in the environment caps it, for tests and comparisons).
void gemm_product(const GemmCall<float>& call);
void gemm_product(const GemmCall<double>& call);

// Which copy gemm_product runs: "generic", "avx2" or "avx512".
const char* gemm_isa();

}  // namespace mixtrain::backends::cpu
