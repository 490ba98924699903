#pragma once
// The random family's kernels: fills from the counter-based generator and dropout, whose mask
// is drawn from the same generator (ops/random.cpp).
#include <cstdint>

#include "backends/kernel.h"
#include "backends/kernel_types.h"

namespace mixtrain::backends {

// dst (floating, contiguous) = draws of the counter-based generator (seed, offset): see
// RandomKind. Values are computed in fp64 and rounded once to dst's dtype (through fp32 for the
// half types, as copy does), identically on every backend.
MT_KERNEL(random, random, void(const Tensor& dst, RandomKind kind, uint64_t seed, uint64_t offset));
// Dropout's mask and scale in one pass: out = x * (keep ? T(1 / (1 - p)) : 0) with keep =
// float(uniform draw offset + i) >= float(p), the scale rounded to x's dtype first. x and out
// contiguous, one dtype. The mask is a pure function of (seed, offset, i), so backward applies
// the same call to the gradient instead of saving a mask.
MT_KERNEL(random, dropout, void(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out));

}  // namespace mixtrain::backends
