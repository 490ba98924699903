#pragma once
// CPU feature checks read from CPUID, for the few features that __builtin_cpu_supports does not
// name in every compiler (clang 14 has no "f16c"). x86-64 only; callers guard on __x86_64__.
#include <cpuid.h>

namespace mixtrain::detail {

// F16C: CPUID leaf 1, ECX bit 29. Its instructions use the AVX (VEX) encoding, so callers also
// check AVX.
inline bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

// AVX512_BF16 (vdpbf16ps): CPUID leaf 7 sub-leaf 1, EAX bit 5. Callers also check AVX-512F,
// which covers the operating system's saving of the zmm state.
inline bool cpu_has_avx512_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
}

}  // namespace mixtrain::detail
