// scaled_dot_product_attention as a composite of matmul, where/add, softmax and dropout, so its
// backward is theirs. Under autocast the op is LowerPrecision: q, k, v (and a float mask) arrive
// in fp16/bf16 and the matmuls run there, but the softmax is taken in fp32 and its result cast
// back. The nested ops see no autocast hook (they run inside this op's scope), so the fp32
// softmax is asked for explicitly here. A causal mask is applied inside the softmax kernel, which
// reads half scores and computes in fp32 itself: one pass where a mask, a where and two casts
// were four, and no fp32 copy of the scores is kept for backward.
// Without a mask, on a device with the fused kernels (CPU, CUDA), the call goes to the fused path
// instead (ops/attention_fused.cpp), which never stores the scores; its dropout draws the same
// mask as the dropout() below for the same generator state.
#include <cmath>
#include <limits>

#include "mixtrain/ops/nn_functional.h"
#include "ops/attention_fused.h"
#include "ops/op_helpers.h"

namespace mixtrain::nn::functional {

using namespace mixtrain::ops;

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  Tensor q = query, k = key, v = value, mask = attn_mask;
  OpScope scope(OpId::scaled_dot_product_attention, {&q, &k, &v, &mask});
  const char* op = "scaled_dot_product_attention";
  check_defined(op, q, "query");
  check_defined(op, k, "key");
  check_defined(op, v, "value");
  check_floating(op, q);
  check_same_device(op, q, k);
  check_same_device(op, q, v);
  MT_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op, ": query ", describe(q), ", key ", describe(k),
           " and value ", describe(v), " must have the same dtype");
  MT_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, op, ": expected [..., L, E] inputs, got query ", describe(q),
           ", key ", describe(k), ", value ", describe(v));
  MT_CHECK(q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2), op, ": query ", describe(q), " key ", describe(k),
           " value ", describe(v), " do not fit [..., L, E], [..., S, E], [..., S, Ev]");
  const int64_t l = q.size(-2), s = k.size(-2), e = q.size(-1);
  const Shape qb(q.shape().begin(), q.shape().end() - 2), kb(k.shape().begin(), k.shape().end() - 2),
      vb(v.shape().begin(), v.shape().end() - 2);
  Shape score_shape = broadcast_shapes(broadcast_shapes(qb, kb, op), vb, op);
  score_shape.insert(score_shape.end(), {l, s});
  if (mask.defined()) {
    check_same_device(op, q, mask);
    MT_CHECK(mask.dtype() == kBool || is_floating(mask.dtype()), op, ": attn_mask must be bool (true = attend) or ",
             "an additive float mask, got ", describe(mask));
    bool fits = mask.dim() <= static_cast<int64_t>(score_shape.size());
    for (int64_t i = 1; fits && i <= mask.dim(); ++i) {
      const int64_t m = mask.size(-i), t = score_shape[score_shape.size() - i];
      fits = m == t || m == 1;
    }
    MT_CHECK(fits, op, ": attn_mask ", describe(mask), " does not broadcast to the attention scores ",
             shape_str(score_shape));
    MT_CHECK(!is_causal, op, ": give either attn_mask or is_causal, not both");
  }
  MT_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, op, ": dropout_p must be in [0, 1), got ", dropout_p);

  const double sc = scale.value_or(1.0 / std::sqrt(static_cast<double>(e)));
  if (fused_attention_applies(q, mask, s))
    return fused_attention(q, k, v, Shape(score_shape.begin(), score_shape.end() - 2), sc, is_causal, dropout_p);
  // Scaling q before the product keeps half scores from overflowing when E is large.
  Tensor scores = matmul(mul(q, sc), k.transpose(-2, -1));
  Tensor attn;
  if (is_causal) {  // top-left aligned, as PyTorch: query i attends to keys j <= i
    attn = causal_softmax(scores);
  } else {
    const DType soft = is_half(q.dtype()) ? kFloat32 : q.dtype();
    scores = scores.to(soft);
    if (mask.defined()) {
      const Tensor minus_inf = full({}, -std::numeric_limits<double>::infinity(), TensorOptions(soft).device(q.device()));
      scores = mask.dtype() == kBool ? where(mask, scores, minus_inf) : add(scores, mask.to(soft));
    }
    attn = softmax(scores, -1, soft).to(q.dtype());
  }
  if (dropout_p > 0.0) attn = dropout(attn, dropout_p, /*training=*/true);
  return matmul(attn, v);
}

}  // namespace mixtrain::nn::functional
