#pragma once
// The embedding family's launchers (embedding.cu), called by backends/cuda/embedding.cpp;
// what every launcher takes and does: launch_args.h.
#include "kernels/cuda/launch_args.h"

namespace mixtrain::kernels {

// weight [v, d]; accum as for upsample2d_backward (pool_upsample.h): v * d fp32 accumulators for
// a half gradient, or null.
void embedding(DType dtype, const void* weight, const int64_t* idx, int64_t k, int64_t d, void* out,
               cudaStream_t stream);
void embedding_backward(DType dtype, const void* grad_out, const int64_t* idx, int64_t k, int64_t v, int64_t d,
                        int64_t padding_idx, void* grad_weight, void* accum, cudaStream_t stream);

}  // namespace mixtrain::kernels
