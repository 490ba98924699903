#!/usr/bin/env bash
# Checks that a portable libmixtrain uses AVX/AVX-512 only where it is chosen at run time:
# disassembles the library and lists every function that touches ymm/zmm registers, mask
# registers or the upper sixteen xmm registers, except the dispatched copies (the AVX2 and
# AVX-512 matrix products and vector unary kernels, the F16C conversions, fused attention's AVX2
# and AVX-512 exp, the AVX-512 fp8 casts, functions cloned for AVX2 with target_clones).
# Exits 1, naming them, if there are others.
# Usage: check_isa.sh LIBRARY [OBJDUMP]
set -euo pipefail
lib=$1
objdump=${2:-objdump}
[ -f "$lib" ] || { echo "check_isa: no library at $lib" >&2; exit 2; }
allowed='gemm_avx2|gemm_avx512|vec_avx2|vec_avx512|attention_avx2|attention_avx512|fp8_avx512|mt_eigen_avx2|mt_eigen_avx512|half_to_float_f16c|float_to_half_f16c|\\[clone \\.avx2\\]'
report=$("$objdump" -d -C --no-show-raw-insn "$lib" | awk -v allowed="$allowed" '
  /^[0-9a-f]+ <.*>:$/ { fn = $0; sub(/^[0-9a-f]+ </, "", fn); sub(/>:$/, "", fn); next }
  /%[yz]mm|%k[1-7]|%xmm(1[6-9]|2[0-9]|3[01])/ {
    if (fn != "" && fn !~ allowed && !(fn in seen)) { seen[fn] = 1; print fn; n++ }
  }
  /%[yz]mm/ { vec = 1 }
  END { if (!vec) print "NO-VECTOR-CODE-FOUND" }')
if [ "$report" = "NO-VECTOR-CODE-FOUND" ]; then
  echo "check_isa: no AVX code at all in $lib: the dispatched copies are missing" >&2
  exit 1
fi
if [ -n "$report" ]; then
  echo "check_isa: functions outside the dispatched copies use AVX registers:" >&2
  echo "$report" | head -40 >&2
  exit 1
fi
echo "check_isa: AVX and AVX-512 code only in the dispatched copies of $lib"
