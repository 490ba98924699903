#pragma once
// The reduce family's launchers (reduce.cu, topk.cu), called by backends/cuda/reduce.cpp;
// what every launcher takes and does: launch_args.h.
#include "kernels/cuda/launch_args.h"

namespace mixtrain::kernels {

// reduce.cu. x [outer, n, inner] contiguous -> out [outer, inner]; indices (may be null) get
// the argmax/argmin. workspace: reduce_workspace_bytes(...) bytes, or null when that is 0.
size_t reduce_workspace_bytes(DType in, int64_t outer, int64_t n, int64_t inner);
void reduce(backends::ReduceOp op, DType in, DType out_dtype, const void* x, void* out, int64_t* indices,
            int64_t outer, int64_t n, int64_t inner, void* workspace, cudaStream_t stream);

// topk.cu. x [rows, n] contiguous -> values [rows, k] (dtype), indices [rows, k], in
// backends::topk's order. topk_backward zeroes grad_x [rows, n] and scatters grad [rows, k] into it.
void topk(DType dtype, const void* x, int64_t rows, int64_t n, int64_t k, bool largest, void* values, int64_t* indices,
          cudaStream_t stream);
void topk_backward(DType dtype, const void* grad, const int64_t* indices, int64_t rows, int64_t n, int64_t k,
                   void* grad_x, cudaStream_t stream);

}  // namespace mixtrain::kernels
