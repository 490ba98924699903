#pragma once
// The norm family's launchers (norm.cu, norm_batch.cu), called by backends/cuda/norm.cpp;
// what every launcher takes and does: launch_args.h.
#include "kernels/cuda/launch_args.h"

namespace mixtrain::kernels {

// norm.cu. Statistics in `stat` (fp32, or fp64 for fp64 data); per-channel affine tensors
// (weight, bias; null for none) and running statistics are in the stat dtype too.
struct RowNormShape {
  int64_t rows, len;   // x viewed as [rows, len]
  int64_t groups, s;   // element j of row r has channel (r % groups) * (len / s) + j / s
  int64_t channels;
};
void row_norm_forward(DType dtype, const void* x, const RowNormShape& sh, double eps, const void* weight,
                      const void* bias, void* out, void* mean, void* rstd, cudaStream_t stream);
// grad_x, grad_weight, grad_bias may be null. workspace: row_norm_workspace_bytes(...)
size_t row_norm_workspace_bytes(DType dtype, const RowNormShape& sh);
void row_norm_backward(DType dtype, const void* x, const void* grad_y, const RowNormShape& sh, const void* mean,
                       const void* rstd, const void* weight, void* grad_x, void* grad_weight, void* grad_bias,
                       void* workspace, cudaStream_t stream);

// norm_batch.cu. Batch norm over [n, c, s]. running_* may be null.
size_t batch_norm_workspace_bytes(DType dtype, int64_t n, int64_t c, int64_t s);
void batch_norm_stats(DType dtype, const void* x, int64_t n, int64_t c, int64_t s, double eps, void* mean,
                      void* invstd, void* running_mean, void* running_var, double momentum, void* workspace,
                      cudaStream_t stream);
void batch_norm_apply(DType dtype, const void* x, int64_t n, int64_t c, int64_t s, const void* mean,
                      const void* invstd, const void* weight, const void* bias, void* out, cudaStream_t stream);
void batch_norm_backward(DType dtype, const void* x, const void* grad_y, int64_t n, int64_t c, int64_t s,
                         const void* mean, const void* invstd, const void* weight, bool batch_stats, void* grad_x,
                         void* grad_weight, void* grad_bias, void* workspace, cudaStream_t stream);

}  // namespace mixtrain::kernels
