#pragma once
// The loss family's kernels (ops/loss.cpp: nll_loss and cross_entropy).
#include <cstdint>

#include "backends/kernel.h"
#include "backends/kernel_types.h"

namespace mixtrain::backends {

// logp viewed as [outer, classes, inner] (contiguous); target int64 [outer, inner]. Writes the
// mean loss over non-ignored targets into loss (0-dim, logp's dtype) and their number into
// count (0-dim int64). Device tensors both, so no host synchronisation is needed.
MT_KERNEL(loss, nll_loss,
          void(const Tensor& logp, const Tensor& target, int64_t outer, int64_t classes, int64_t inner,
               const NllLossArgs& args, const Tensor& loss, const Tensor& count));
// grad_logp = -grad_loss / count * ((1-eps) onehot + eps / classes) on non-ignored positions.
MT_KERNEL(loss, nll_loss_backward,
          void(const Tensor& target, int64_t outer, int64_t classes, int64_t inner, const NllLossArgs& args,
               const Tensor& grad_loss, const Tensor& count, const Tensor& grad_logp));

}  // namespace mixtrain::backends
