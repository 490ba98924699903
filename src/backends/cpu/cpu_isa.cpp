// The instruction-set choice of cpu_isa.h. MT_GEMM_HAVE_AVX2/AVX512 say which copies the build
// made (cmake/MixtrainCpuDispatch.cmake defines them on this file).
#include "backends/cpu/cpu_isa.h"

#include <cstdlib>
#include <cstring>

#include "base/cpu_features.h"

namespace mixtrain::backends::cpu {

namespace {

CpuIsa detect() {
  CpuIsa best = CpuIsa::Generic;
#if defined(__x86_64__) && (defined(MT_GEMM_HAVE_AVX2) || defined(MT_GEMM_HAVE_AVX512))
  __builtin_cpu_init();
#if defined(MT_GEMM_HAVE_AVX2)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && detail::cpu_has_f16c())
    best = CpuIsa::Avx2;
#endif
#if defined(MT_GEMM_HAVE_AVX512)
  if (best == CpuIsa::Avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
    best = CpuIsa::Avx512;
#endif
#endif
  // A cap from the environment, never a raise: asking for more than the CPU has is ignored.
  const CpuIsa cap = cpu_isa_cap();
  return static_cast<int>(cap) < static_cast<int>(best) ? cap : best;
}

}  // namespace

CpuIsa cpu_isa_cap() {
  const char* cap = std::getenv("MIXTRAIN_CPU_ISA");
  if (cap == nullptr) return CpuIsa::Avx512;
  if (std::strcmp(cap, "generic") == 0) return CpuIsa::Generic;
  if (std::strcmp(cap, "avx2") == 0) return CpuIsa::Avx2;
  return CpuIsa::Avx512;
}

CpuIsa cpu_isa() {
  static const CpuIsa chosen = detect();
  return chosen;
}

}  // namespace mixtrain::backends::cpu
