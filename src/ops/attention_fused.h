#pragma once
// scaled_dot_product_attention's fused path (ops/attention_fused.cpp): one kernel forward and one
// backward (backends/attention.h) instead of the composite, for the calls it covers.
#include <cstdint>

#include "mixtrain/base/shape.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain::ops {

// Whether the fused kernels take this call: no attn_mask, at least one key, and a fused kernel
// for q's device (on meta tensors: for the dry run's target), and set_fused_attention_enabled has
// not turned it off. Dropout does not matter: the kernels apply it.
bool fused_attention_applies(const Tensor& q, const Tensor& attn_mask, int64_t s);

// Whether the fused path may be taken at all (default true; process-wide). Benchmarks and tests
// turn it off to run the composite on the same calls.
void set_fused_attention_enabled(bool enabled);
bool fused_attention_enabled();

// Attention of q [..., L, E], k [..., S, E], v [..., S, Ev] (checked by the caller; batch dims
// broadcast), with its own backward node saving q, k, v, the output and the logsumexp. dropout_p > 0
// takes b * L * S draws from the default generator, as the composite's dropout() does.
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Shape& batch, double scale,
                       bool causal, double dropout_p = 0.0);

}  // namespace mixtrain::ops
