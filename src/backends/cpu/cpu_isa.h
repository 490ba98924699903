#pragma once
// Which of the copies compiled per instruction set (cmake/MixtrainCpuDispatch.cmake: the matrix
// product, the vector unary kernels) this CPU runs: the widest it supports among those built, once
// per process. MIXTRAIN_CPU_ISA=generic|avx2 in the environment caps it (tests, comparisons).
namespace mixtrain::backends::cpu {

enum class CpuIsa { Generic, Avx2, Avx512 };

CpuIsa cpu_isa();

}  // namespace mixtrain::backends::cpu
