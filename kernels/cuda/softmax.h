#pragma once
// The softmax family's launchers (softmax.cu), called by backends/cuda/softmax.cpp;
// what every launcher takes and does: launch_args.h.
#include "kernels/cuda/launch_args.h"

namespace mixtrain::kernels {

// Over the middle axis of [outer, n, inner], one dtype for x and out.
// causal_rows: see backends::softmax (backends/softmax.h; rows only).
void softmax(DType dtype, const void* x, void* out, int64_t outer, int64_t n, int64_t inner, bool log, int64_t causal_rows,
             cudaStream_t stream);
void softmax_backward(DType dtype, const void* y, const void* grad_y, void* grad_x, int64_t outer, int64_t n,
                      int64_t inner, bool log, cudaStream_t stream);

}  // namespace mixtrain::kernels
