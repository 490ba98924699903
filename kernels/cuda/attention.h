#pragma once
// The attention family's launchers (attention.cu), called by backends/cuda/attention.cpp;
// what every launcher takes and does: launch_args.h.
#include "kernels/cuda/launch_args.h"

namespace mixtrain::kernels {

// Fused attention (backends/attention.h): q [B, L, E], k [B, S, E], v [B, S, Ev],
// out [B, L, Ev] contiguous in `dtype`; lse [B, L] and the backward's workspace
// (backends::cuda::attention_workspace_bytes, cuda/workspace.h) in fp32, fp64 for fp64.
// Dropout as backends::AttentionShape's: probability (b, i, j) kept when
// dropout_keep(seed, offset + (b * l + i) * s + j, p).
struct AttentionDims {
  int64_t batch, l, s, e, ev;
  double scale;
  bool causal;
  double dropout_p;
  uint64_t seed, offset;
};
void attention_forward(DType dtype, const void* q, const void* k, const void* v, const AttentionDims& d, void* out,
                       void* lse, cudaStream_t stream);
void attention_backward(DType dtype, const void* q, const void* k, const void* v, const void* out,
                        const void* grad_out, const void* lse, const AttentionDims& d, void* grad_q, void* grad_k,
                        void* grad_v, void* workspace, cudaStream_t stream);

}  // namespace mixtrain::kernels
