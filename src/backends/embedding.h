#pragma once
// The embedding family's kernels (ops/embedding.cpp).
#include <cstdint>

#include "backends/kernel.h"

namespace mixtrain::backends {

// out [K, D] = weight[indices[k]] for indices (int64, K of them) and weight [V, D]. Throws on
// an index outside [0, V).
MT_KERNEL(embedding, embedding, void(const Tensor& weight, const Tensor& indices, const Tensor& out));
// grad_weight [V, D] (overwritten) = scatter-add of grad_out rows at indices, skipping padding_idx.
MT_KERNEL(embedding, embedding_backward,
          void(const Tensor& grad_out, const Tensor& indices, int64_t padding_idx, const Tensor& grad_weight));

}  // namespace mixtrain::backends
