#pragma once
// The random family's launchers (random.cu), called by backends/cuda/random.cpp;
// what every launcher takes and does: launch_args.h.
#include "kernels/cuda/launch_args.h"

namespace mixtrain::kernels {

void random(DType dtype, void* out, int64_t n, backends::RandomKind kind, uint64_t seed, uint64_t offset,
            cudaStream_t stream);
// out = x * (keep ? scale : 0), keep from the counter-based draws (backends::dropout); contiguous.
void dropout(DType dtype, const void* x, void* out, int64_t n, double p, uint64_t seed, uint64_t offset,
             cudaStream_t stream);

}  // namespace mixtrain::kernels
