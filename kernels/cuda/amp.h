#pragma once
// The amp family's launchers (amp.cu), called by backends/cuda/amp.cpp;
// what every launcher takes and does: launch_args.h.
#include "kernels/cuda/launch_args.h"

namespace mixtrain::kernels {

// One launch over a list of tensors: `meta` is device memory holding
// multi_tensor_meta_bytes(count, chunks) bytes filled by pack_multi_tensor_meta on the host.
struct TensorSpan {
  const void* in;
  void* out;
  int64_t n;
};
constexpr int64_t kAmpChunk = 1 << 16;  // elements per block
int64_t multi_tensor_chunks(const TensorSpan* spans, int count);
size_t multi_tensor_meta_bytes(int count, int64_t chunks);
void pack_multi_tensor_meta(const TensorSpan* spans, int count, void* host_buffer);
// Whether every span is aligned for the vectorized loop (pass the result as `vectorize`).
bool multi_tensor_vectorizable(const TensorSpan* spans, int count, DType grad, DType out);
void non_finite_check_and_unscale(DType grad, DType out, const void* meta_device, int count, int64_t chunks,
                                  bool vectorize, const float* inv_scale, float* found_inf, double* stats,
                                  cudaStream_t stream);
void update_scale(float* scale, int32_t* growth_tracker, int32_t* hysteresis_tracker, const float* found_inf,
                  const backends::ScaleUpdateArgs& args, float* at_min_scale, cudaStream_t stream);

}  // namespace mixtrain::kernels
