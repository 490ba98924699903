#pragma once
// scaled_dot_product_attention's fused path (ops/attention_fused.cpp): one kernel forward and one
// backward (backends/attention.h) instead of the composite, for the calls it covers.
#include <cstdint>

#include "mixtrain/base/shape.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain::ops {

// Which path an unmasked call takes. Measured (the default): the fused kernels, except where the
// table in attention_fused.cpp says the composite measured faster on that device, dtype and
// sequence length. Fused and Composite force one path (process-wide): benchmarks and tests
// compare the two on the same calls.
enum class AttentionPath { Measured, Fused, Composite };
void set_attention_path(AttentionPath path);
AttentionPath attention_path();

// The measured table's choice for a device, the dtype q computes in and L, S: true for the fused
// kernels, false for the composite. A pure lookup, also for devices this build lacks.
bool fused_attention_measured_faster(DeviceType device, DType dtype, int64_t l, int64_t s);

// Whether the fused kernels take this call: no attn_mask, at least one key, a fused kernel for
// q's device (on meta tensors: the dry run's target), and the path above picks them. Dropout does
// not matter: the kernels apply it.
bool fused_attention_applies(const Tensor& q, const Tensor& attn_mask, int64_t s);

// Attention of q [..., L, E], k [..., S, E], v [..., S, Ev] (checked by the caller; batch dims
// broadcast), with its own backward node saving q, k, v, the output and the logsumexp. dropout_p > 0
// takes b * L * S draws from the default generator, as the composite's dropout() does.
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Shape& batch, double scale,
                       bool causal, double dropout_p = 0.0);

}  // namespace mixtrain::ops
