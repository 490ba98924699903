#pragma once
// The reduce family's kernels (ops/reduce.cpp: sum, mean, max, min, argmax, argmin; and the
// gradient norm of nn::utils::clip_grad_norm_).
#include <cstdint>

#include "backends/kernel.h"
#include "backends/kernel_types.h"

namespace mixtrain::backends {

// x viewed as [outer, reduce, inner] (contiguous); out [outer, inner] in out's dtype, which may
// be wider than x's (sum with dtype=fp32). indices (int64, may be undefined) get the arg of Max/Min.
MT_KERNEL(reduce, reduce,
          void(ReduceOp op, const Tensor& x, int64_t outer, int64_t reduce, int64_t inner, const Tensor& out,
               const Tensor& indices));
// out (0-dim fp64, on the host) = sum of |x|^p over a dense x, or max |x| for p = inf (a NaN
// propagates): one gradient's part of clip_grad_norm_'s total. Summed in fixed chunks combined in
// order, so the value does not depend on the number of threads. CPU only: on a device,
// clip_grad_norm_ composes ops so that nothing is read back.
MT_KERNEL(reduce, norm_part, void(const Tensor& x, double p, const Tensor& out));

}  // namespace mixtrain::backends
