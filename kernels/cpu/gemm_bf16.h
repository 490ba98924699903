#pragma once
// The CPU backend's bf16 matrix product: C (= or +=) A * B with bf16 operands, fp32 accumulation
// and an fp32 result, on the AVX512_BF16 dot-product instruction (vdpbf16ps). The kernel is
// compiled in its own translation unit with AVX-512 flags (gemm_bf16_avx512.cpp,
// cmake/MixtrainCpuDispatch.cmake) and runs only where the CPU reports AVX512_BF16; elsewhere
// callers keep the fp32 path (widen, gemm_product, round). Only plain types cross this header.
#include <cstdint>

#include "kernels/cpu/gemm_eigen.h"

namespace mixtrain::backends::cpu {

// Operands as bf16 bit patterns (uint16_t) or as fp32 values that hold bf16 values (widened from
// bf16, as conv.cpp's are): the packer keeps their high 16 bits, which is exact for those and
// rounds any other value toward zero.
template <class S>
struct GemmBf16Call {
  GemmMatrix<S> a, b;
  float* out;  // row-major [a.rows, b.cols], leading dimension ldc
  int64_t ldc;
  bool accumulate;
};

namespace gemm_avx512bf16 {
void gemm_product(const GemmBf16Call<uint16_t>&);
void gemm_product(const GemmBf16Call<float>&);
}  // namespace gemm_avx512bf16

// Whether bf16 products take the vdpbf16ps kernel: built, the CPU has AVX512_BF16 and the
// AVX-512 Eigen copy is allowed (MIXTRAIN_CPU_ISA caps it off), and MIXTRAIN_CPU_BF16_GEMM is
// not 0. set_bf16_gemm_override(0 or 1) forces it off or (where possible) on, -1 restores the
// detected choice; tests compare the two paths with it.
bool bf16_gemm_enabled();
void set_bf16_gemm_override(int mode);

// How many products the kernel has run in this process (tests check that a path reaches it).
int64_t gemm_bf16_calls();

// Runs the kernel; callers check bf16_gemm_enabled() first.
void gemm_bf16_product(const GemmBf16Call<uint16_t>& call);
void gemm_bf16_product(const GemmBf16Call<float>& call);

}  // namespace mixtrain::backends::cpu
