#pragma once
// MultiheadAttention on nn::functional::scaled_dot_product_attention, with PyTorch's parameters:
// in_proj_weight [3E, E] (query, key and value projections stacked), in_proj_bias [3E] and
// out_proj (a Linear E -> E).
#include <cstdint>

#include "mixtrain/nn/linear.h"
#include "mixtrain/nn/module.h"

namespace mixtrain::nn {

class MultiheadAttentionOptions {
 public:
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads) : embed_dim_(embed_dim), num_heads_(num_heads) {}
  MultiheadAttentionOptions& dropout(double v) { dropout_ = v; return *this; }
  MultiheadAttentionOptions& bias(bool v) { bias_ = v; return *this; }
  // true: inputs and output are [N, L, E]; false (PyTorch's default): [L, N, E].
  MultiheadAttentionOptions& batch_first(bool v) { batch_first_ = v; return *this; }
  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  double dropout() const { return dropout_; }
  bool bias() const { return bias_; }
  bool batch_first() const { return batch_first_; }

 private:
  int64_t embed_dim_, num_heads_;
  double dropout_ = 0.0;
  bool bias_ = true;
  bool batch_first_ = false;
};

// Initialised as PyTorch: xavier_uniform_ on in_proj_weight, zero biases, out_proj.weight as a
// Linear's. Unlike PyTorch's forward, which also returns the averaged attention weights, this one
// returns the output only (need_weights=False): the fused attention never forms the weights.
class MultiheadAttentionImpl : public Module {
 public:
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttentionImpl(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  explicit MultiheadAttentionImpl(const MultiheadAttentionOptions& options);

  void reset_parameters();
  // attn_mask: [L, S] or [N * num_heads, L, S]; bool with PyTorch's MultiheadAttention meaning
  // (true = NOT allowed to attend), or float, added to the scores. is_causal masks key j > query i
  // (and replaces attn_mask).
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask = Tensor(),
                 bool is_causal = false);
  // Self-attention: forward(x, x, x).
  Tensor forward(const Tensor& x) override { return forward(x, x, x); }
  const MultiheadAttentionOptions& options() const { return options_; }

  Tensor in_proj_weight, in_proj_bias;  // in_proj_bias undefined without bias
  Linear out_proj{nullptr};

 private:
  MultiheadAttentionOptions options_;
};
MT_MODULE(MultiheadAttention);

}  // namespace mixtrain::nn
