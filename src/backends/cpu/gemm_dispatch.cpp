// Picks the copy of the matrix product (gemm_eigen.h) for the CPU the program runs on, once.
#include <cstdlib>
#include <cstring>

#include "backends/cpu/gemm_eigen.h"
#include "core/cpu_features.h"

namespace mixtrain::backends::cpu {

namespace {

enum class Isa { Generic, Avx2, Avx512 };

Isa detect() {
  Isa best = Isa::Generic;
#if defined(__x86_64__) && (defined(MT_GEMM_HAVE_AVX2) || defined(MT_GEMM_HAVE_AVX512))
  __builtin_cpu_init();
#if defined(MT_GEMM_HAVE_AVX2)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && detail::cpu_has_f16c())
    best = Isa::Avx2;
#endif
#if defined(MT_GEMM_HAVE_AVX512)
  if (best == Isa::Avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
    best = Isa::Avx512;
#endif
#endif
  // A cap from the environment, never a raise: asking for more than the CPU has is ignored.
  if (const char* cap = std::getenv("MIXTRAIN_CPU_ISA")) {
    if (std::strcmp(cap, "generic") == 0) best = Isa::Generic;
    else if (std::strcmp(cap, "avx2") == 0 && best == Isa::Avx512) best = Isa::Avx2;
  }
  return best;
}

Isa isa() {
  static const Isa chosen = detect();
  return chosen;
}

template <class S>
void run(const GemmCall<S>& call) {
  switch (isa()) {
#if defined(MT_GEMM_HAVE_AVX512)
    case Isa::Avx512: return gemm_avx512::gemm_product(call);
#endif
#if defined(MT_GEMM_HAVE_AVX2)
    case Isa::Avx2: return gemm_avx2::gemm_product(call);
#endif
    default: return gemm_generic::gemm_product(call);
  }
}

}  // namespace

void gemm_product(const GemmCall<float>& call) { run(call); }
void gemm_product(const GemmCall<double>& call) { run(call); }

const char* gemm_isa() {
  switch (isa()) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    default: return "generic";
  }
}

}  // namespace mixtrain::backends::cpu
