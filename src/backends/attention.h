#pragma once
// The attention family's kernels (ops/attention.cpp): fused scaled-dot-product attention, forward
// and backward computed tile by tile with an online softmax (FlashAttention-2), so the [L, S]
// scores are never stored whole.
#include <cstdint>

#include "backends/kernel.h"

namespace mixtrain::backends {

// The sizes of one fused attention call. batch is every leading dim flattened (batch x heads).
struct AttentionShape {
  int64_t batch, l, s, e, ev;  // queries, keys, head dim of q/k, head dim of v
  double scale;                // multiplies q . k
  bool causal;                 // top-left aligned: query i attends to keys j <= i
  // Dropout on the probabilities, p in [0, 1): probability (b, i, j) is kept, times 1 / (1 - p)
  // rounded to the dtype, when dropout_keep(seed, offset + (b * l + i) * s + j, p) (base/rng.h):
  // the draws and the test that dropout() takes on the contiguous [B, L, S] probabilities, so
  // the fused and the composite path drop the same elements for the same generator state.
  double dropout_p = 0.0;
  uint64_t seed = 0, offset = 0;
};

// q [B, L, E], k [B, S, E], v [B, S, Ev]: contiguous, one floating dtype, S >= 1. Writes
// out [B, L, Ev] (q's dtype; half: fp32 arithmetic, rounded once) and lse [B, L] (fp32, fp64 for
// fp64 inputs), the logsumexp of each query's scaled scores (before dropout), from which backward
// recomputes the probabilities and, from the seed, the dropout mask. Results do not depend on the
// thread count.
MT_KERNEL(attention, attention_forward,
          void(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& shape, const Tensor& out,
               const Tensor& lse));
// The gradients of attention_forward's out for grad_out [B, L, Ev] (contiguous, q's dtype), from
// the forward's inputs, out and lse. grad_q, grad_k, grad_v: contiguous, q's dtype, all written.
MT_KERNEL(attention, attention_backward,
          void(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& grad_out,
               const Tensor& lse, const AttentionShape& shape, const Tensor& grad_q, const Tensor& grad_k,
               const Tensor& grad_v));

}  // namespace mixtrain::backends
