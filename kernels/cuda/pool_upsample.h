#pragma once
// The pool_upsample family's launchers (pool_upsample.cu), called by backends/cuda/pool_upsample.cpp;
// what every launcher takes and does: launch_args.h.
#include "kernels/cuda/launch_args.h"

namespace mixtrain::kernels {

// NCHW planes.
struct Planes {
  int64_t planes, h, w, ho, wo;  // N * C, input and output plane sizes
  int64_t channels_last = 0;     // C when the tensors are channels-last (max_pool2d only), else 0
};
void max_pool2d(DType dtype, const void* x, const Planes& p, const backends::Pool2dParams& q, void* out,
                int64_t* indices, cudaStream_t stream);
// accum: planes * h * w fp32 accumulators for half gradients, null for fp32/fp64.
void max_pool2d_backward(DType dtype, const void* grad_out, const int64_t* indices, const Planes& p, void* grad_x,
                         void* accum, cudaStream_t stream);
void upsample2d(DType dtype, const void* x, const Planes& p, const backends::Upsample2dParams& q, void* out,
                cudaStream_t stream);
void upsample2d_backward(DType dtype, const void* grad_out, const Planes& p, const backends::Upsample2dParams& q,
                         void* grad_x, void* accum, cudaStream_t stream);

}  // namespace mixtrain::kernels
