#pragma once
// The loss family's launchers (loss.cu), called by backends/cuda/loss.cpp;
// what every launcher takes and does: launch_args.h.
#include "kernels/cuda/launch_args.h"

namespace mixtrain::kernels {

// workspace: backends::cuda::kNllWorkspaceBytes (cuda/workspace.h) of device memory. Targets
// out of range are skipped (the backend checks them first with check_indices).
void nll_loss(DType dtype, const void* logp, const int64_t* target, int64_t outer, int64_t classes, int64_t inner,
              const backends::NllLossArgs& args, void* loss, int64_t* count, void* workspace, cudaStream_t stream);
void nll_loss_backward(DType dtype, const int64_t* target, int64_t outer, int64_t classes, int64_t inner,
                       const backends::NllLossArgs& args, const void* grad_loss, const int64_t* count,
                       void* grad_logp, cudaStream_t stream);
// Sets *flag (device int) to 1 when an index lies outside [0, limit) and is not `allowed` (the
// target check of nll_loss and the index check of embedding.cpp).
void check_indices(const int64_t* idx, int64_t n, int64_t limit, int64_t allowed, int* flag, cudaStream_t stream);

}  // namespace mixtrain::kernels
