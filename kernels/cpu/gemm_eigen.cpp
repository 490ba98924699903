// One copy of the Eigen matrix product (gemm_eigen.h). MT_GEMM_ISA names the copy's namespace;
// the build defines it, with the matching -m flags and Eigen renamed, for the AVX2 and AVX-512
// copies. Include nothing of mixtrain's here but gemm_eigen.h: an inline function compiled with
// AVX-512 could otherwise be picked by the linker for every caller.
//
// Single-threaded: gemm_dispatch.cpp splits large products into blocks fixed by their shape and
// runs them on the backend's threads. Eigen's own split follows the live OpenMP team, so a
// product's bits changed with the team size (the governor's cool-downs, docs/CPU.md). No other
// file of the library instantiates Eigen's products, so the macro cannot differ between copies
// of one template.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include "kernels/cpu/gemm_eigen.h"

#ifndef MT_GEMM_ISA
#define MT_GEMM_ISA gemm_generic
#endif

namespace mixtrain::backends::cpu::MT_GEMM_ISA {

namespace {

template <class S>
using RowMat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S>
using ColMat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;

template <class S, class F>
void with_map(const GemmMatrix<S>& m, F&& f) {
  if (m.col_stride == 1 || m.cols == 1)
    f(Eigen::Map<const RowMat<S>, 0, Eigen::OuterStride<>>(m.data, m.rows, m.cols, Eigen::OuterStride<>(m.row_stride)));
  else
    f(Eigen::Map<const ColMat<S>, 0, Eigen::OuterStride<>>(m.data, m.rows, m.cols, Eigen::OuterStride<>(m.col_stride)));
}

template <class S>
void product(const GemmCall<S>& c) {
  Eigen::Map<RowMat<S>, 0, Eigen::OuterStride<>> out(c.out, c.a.rows, c.b.cols, Eigen::OuterStride<>(c.ldc));
  with_map(c.a, [&](const auto& a) {
    with_map(c.b, [&](const auto& b) {
      if (c.accumulate)
        out.noalias() += a * b;
      else
        out.noalias() = a * b;
    });
  });
}

}  // namespace

void gemm_product(const GemmCall<float>& call) { product(call); }
void gemm_product(const GemmCall<double>& call) { product(call); }

}  // namespace mixtrain::backends::cpu::MT_GEMM_ISA
