// MultiheadAttention.
#include "mixtrain/nn/attention.h"

#include "mixtrain/base/error.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/nn/init.h"
#include "nn/describe.h"

namespace mixtrain::nn {

namespace {
using detail::describe;
}  // namespace

MultiheadAttentionImpl::MultiheadAttentionImpl(const MultiheadAttentionOptions& options)
    : Module("MultiheadAttention"), options_(options) {
  const int64_t e = options.embed_dim(), h = options.num_heads();
  MT_CHECK(e > 0 && h > 0 && e % h == 0, "MultiheadAttention: embed_dim = ", e,
           " must be a positive multiple of num_heads = ", h);
  MT_CHECK(options.dropout() >= 0 && options.dropout() < 1, "MultiheadAttention: dropout must be in [0, 1), got ",
           options.dropout());
  in_proj_weight = register_parameter("in_proj_weight", empty({3 * e, e}));
  if (options.bias()) in_proj_bias = register_parameter("in_proj_bias", empty({3 * e}));
  out_proj = register_module("out_proj", Linear(LinearOptions(e, e).bias(options.bias())));
  reset_parameters();
}

void MultiheadAttentionImpl::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  out_proj->reset_parameters();
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

Tensor MultiheadAttentionImpl::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                       const Tensor& attn_mask, bool is_causal) {
  const int64_t e = options_.embed_dim(), h = options_.num_heads(), d = e / h;
  for (const Tensor* t : {&query, &key, &value})
    MT_CHECK(t->defined() && t->dim() == 3 && t->size(2) == e, "MultiheadAttention: expected query, key and value ",
             options_.batch_first() ? "[N, L, E]" : "[L, N, E]", " with E = ", e, ", got ", describe(*t));
  // Work batch-first: [N, L, E].
  auto batch_first = [&](const Tensor& t) { return options_.batch_first() ? t : t.transpose(0, 1); };
  const Tensor q_in = batch_first(query), k_in = batch_first(key), v_in = batch_first(value);
  const int64_t n = q_in.size(0), l = q_in.size(1), s = k_in.size(1);
  MT_CHECK(k_in.size(0) == n && v_in.size(0) == n && v_in.size(1) == s, "MultiheadAttention: query ", describe(query),
           ", key ", describe(key), " and value ", describe(value), " disagree on batch or source length");

  Tensor q, k, v;
  if (query.is_same(key) && key.is_same(value)) {
    // Self-attention: one [N, L, 3E] projection, split into its three parts.
    const auto qkv = chunk(linear(q_in, in_proj_weight, in_proj_bias), 3, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    auto part = [&](const Tensor& t, int64_t i) {
      const Tensor b = in_proj_bias.defined() ? in_proj_bias.slice(0, i * e, (i + 1) * e) : Tensor();
      return linear(t, in_proj_weight.slice(0, i * e, (i + 1) * e), b);
    };
    q = part(q_in, 0), k = part(k_in, 1), v = part(v_in, 2);
  }
  // [N, T, E] -> [N, H, T, D]
  auto heads = [&](const Tensor& t, int64_t len) { return t.reshape({n, len, h, d}).transpose(1, 2); };

  Tensor mask;
  if (attn_mask.defined() && !is_causal) {
    MT_CHECK((attn_mask.dim() == 2 && attn_mask.size(0) == l && attn_mask.size(1) == s) ||
                 (attn_mask.dim() == 3 && attn_mask.size(0) == n * h && attn_mask.size(1) == l && attn_mask.size(2) == s),
             "MultiheadAttention: attn_mask must be [", l, ", ", s, "] or [", n * h, ", ", l, ", ", s, "], got ",
             describe(attn_mask));
    mask = attn_mask.dim() == 3 ? attn_mask.reshape({n, h, l, s}) : attn_mask;
    // MultiheadAttention's bool masks mark what is hidden; the attention op's mark what is seen.
    if (mask.dtype() == kBool) mask = eq(mask, zeros({}, TensorOptions(kBool).device(mask.device())));
  }
  const double p = is_training() ? options_.dropout() : 0.0;
  const Tensor out = functional::scaled_dot_product_attention(heads(q, l), heads(k, s), heads(v, s), mask, p,
                                                              is_causal);
  // [N, H, L, D] -> [N, L, E]
  const Tensor merged = out_proj(out.transpose(1, 2).reshape({n, l, e}));
  return options_.batch_first() ? merged : merged.transpose(0, 1);
}

}  // namespace mixtrain::nn
