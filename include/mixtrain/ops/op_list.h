#pragma once
// Every op mixtrain has, with its default autocast policy (PyTorch's CUDA lists; an op they do
// not list is Passthrough). This X-macro is the single source of op ids, names and policies.
#include <cstdint>
#include <string>
#include <string_view>

#include "mixtrain/ops/cast_policy_enum.h"

#define MT_FORALL_OPS(_)                                   \
  /* casts and layout */                                   \
  _(to, Passthrough)                                       \
  _(contiguous, Passthrough)                               \
  _(clone, Passthrough)                                    \
  _(reshape, Passthrough)                                  \
  _(transpose, Passthrough)                                \
  _(permute, Passthrough)                                  \
  _(slice, Passthrough)                                    \
  _(expand, Passthrough)                                   \
  /* matrix products: tensor cores */                      \
  _(matmul, LowerPrecision)                                \
  _(bmm, LowerPrecision)                                   \
  _(linear, LowerPrecision)                                \
  /* fp8 operands are never cast (PyTorch lists no fp8 op) */ \
  _(scaled_mm, Passthrough)                                \
  /* elementwise arithmetic */                             \
  _(add, Passthrough)                                      \
  _(sub, Passthrough)                                      \
  _(mul, Passthrough)                                      \
  _(div, Passthrough)                                      \
  _(maximum, Passthrough)                                  \
  _(minimum, Passthrough)                                  \
  _(hypot, Passthrough)                                    \
  _(neg, Passthrough)                                      \
  _(abs, Passthrough)                                      \
  _(square, Passthrough)                                   \
  _(sqrt, Passthrough)                                     \
  _(tanh, Passthrough)                                     \
  _(sigmoid, Passthrough)                                  \
  _(relu, Passthrough)                                     \
  _(gelu, Passthrough)                                     \
  _(silu, Passthrough)                                     \
  _(where, Passthrough)                                    \
  _(masked_fill, Passthrough)                              \
  _(clamp, Passthrough)                                    \
  _(clamp_min, Passthrough)                                \
  _(clamp_max, Passthrough)                                \
  _(compare, Passthrough)                                  \
  /* numerically unsafe in half precision */               \
  _(exp, Float32)                                          \
  _(log, Float32)                                          \
  _(pow, Float32)                                          \
  _(rsqrt, Float32)                                        \
  _(softplus, Float32)                                     \
  /* reductions */                                         \
  _(sum, Float32OptDtype)                                  \
  _(mean, Passthrough)                                     \
  _(max, Passthrough)                                      \
  _(amax, Passthrough)                                     \
  _(min, Passthrough)                                      \
  _(argmax, Passthrough)                                   \
  _(all, Passthrough)                                      \
  _(any, Passthrough)                                      \
  _(topk, Passthrough)                                     \
  /* norm: fp32 as PyTorch's norm (fp32_append_dtype) */   \
  _(norm, Float32)                                         \
  _(softmax, Float32OptDtype)                              \
  _(log_softmax, Float32OptDtype)                          \
  /* losses */                                             \
  _(mse_loss, Float32)                                     \
  _(nll_loss, Float32)                                     \
  _(cross_entropy, Float32)                                \
  _(binary_cross_entropy_with_logits, Float32)             \
  _(binary_cross_entropy, Banned)                          \
  /* mixed-input ops: the widest floating input type */    \
  _(dot, Promote)                                          \
  _(addcmul, Promote)                                      \
  /* nn */                                                 \
  _(dropout, Passthrough)                                  \
  /* convolution: tensor cores */                          \
  _(conv2d, LowerPrecision)                                \
  _(conv_transpose2d, LowerPrecision)                      \
  _(scaled_dot_product_attention, LowerPrecision)          \
  /* pooling and resampling */                             \
  _(max_pool2d, Passthrough)                               \
  _(upsample_nearest2d, Float32)                           \
  _(upsample_bilinear2d, Float32)                          \
  /* normalization (batch_norm's stats are fp32 inside) */ \
  _(batch_norm, Passthrough)                               \
  _(group_norm, Float32)                                   \
  _(layer_norm, Float32)                                   \
  _(embedding, Passthrough)                                \
  /* tensor lists */                                       \
  _(cat, Passthrough)                                      \
  _(stack, Passthrough)                                    \
  _(split, Passthrough)

namespace mixtrain::ops {

enum class OpId : uint16_t {
#define MT_OP_ENUM(name, policy) name,
  MT_FORALL_OPS(MT_OP_ENUM)
#undef MT_OP_ENUM
      kCount
};

constexpr int kNumOps = static_cast<int>(OpId::kCount);

const char* op_name(OpId op);
// The name of the autograd node an op records, PyTorch's scheme: the op's name in CamelCase and
// "Backward0" (log_softmax -> "LogSoftmaxBackward0"; a trailing '_' of an in-place op is dropped,
// relu_ -> "ReluBackward0"). PyTorch's digit numbers an op's overloads; mixtrain's is always 0.
std::string backward_node_name(std::string_view op);
const char* backward_name(OpId op);  // backward_node_name(op_name(op)), with static storage
bool op_from_name(std::string_view name, OpId* out);
amp::CastPolicy default_policy(OpId op);

// The live policy table (starts at the defaults; amp may override entries).
amp::CastPolicy policy(OpId op);
void set_policy(OpId op, amp::CastPolicy p);
void reset_policies();

}  // namespace mixtrain::ops
