#pragma once
// The reduce family's kernels (ops/reduce.cpp: sum, mean, max, min, argmax, argmin; ops/topk.cpp;
// and the gradient norm of nn::utils::clip_grad_norm_).
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
// The first k elements of each row of x [rows, n] (contiguous, not bool) in the order `largest`
// asks for: descending with NaN first, or ascending with NaN last; equal values by index. values
// [rows, k] in x's dtype, indices [rows, k] int64, both contiguous.
MT_KERNEL(reduce, topk,
          void(const Tensor& x, int64_t rows, int64_t n, int64_t k, bool largest, const Tensor& values,
               const Tensor& indices));
// grad_x [rows, n] (contiguous, floating) = 0 but grad_x[r, indices[r, j]] = grad[r, j]; the indices
// of a row are distinct (topk's).
MT_KERNEL(reduce, topk_backward,
          void(const Tensor& grad, const Tensor& indices, int64_t rows, int64_t n, int64_t k, const Tensor& grad_x));
MT_KERNEL(reduce, norm_part, void(const Tensor& x, double p, const Tensor& out));

}  // namespace mixtrain::backends
