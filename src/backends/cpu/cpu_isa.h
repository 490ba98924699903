#pragma once
// Which of the copies compiled per instruction set (cmake/MixtrainCpuDispatch.cmake: the matrix
// product, the vector unary kernels) this CPU runs: the widest it supports among those built, once
// per process. MIXTRAIN_CPU_ISA=generic|avx2 in the environment caps it (tests, comparisons).
namespace mixtrain::backends::cpu {

enum class CpuIsa { Generic, Avx2, Avx512 };

CpuIsa cpu_isa();

// The cap MIXTRAIN_CPU_ISA asks for (Avx512 when unset: no cap), whatever the CPU has. oneDNN
// takes the same cap (onednn/engine.cpp), so one switch makes an AVX-512 machine run the paths an
// AVX2 machine runs.
CpuIsa cpu_isa_cap();

}  // namespace mixtrain::backends::cpu
