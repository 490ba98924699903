#pragma once
// The softmax family's kernels (ops/softmax.cpp: softmax, log_softmax, the causal attention
// softmax).
#include <cstdint>

#include "backends/kernel.h"

namespace mixtrain::backends {

// Softmax over the middle axis of x viewed as [outer, n, inner] (contiguous); out has x's dtype
// (half: fp32 arithmetic, rounded once). causal_rows > 0 (softmax over rows, inner == 1): row r
// takes only entries j <= r % causal_rows and writes 0 beyond, the causal attention mask of
// [..., L = causal_rows, S] scores without a mask tensor or an extra pass.
MT_KERNEL(softmax, softmax,
          void(const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log, int64_t causal_rows,
               const Tensor& out));
MT_KERNEL(softmax, softmax_backward,
          void(const Tensor& y, const Tensor& grad_y, int64_t outer, int64_t n, int64_t inner, bool log,
               const Tensor& grad_x));

}  // namespace mixtrain::backends
