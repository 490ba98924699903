#pragma once
// A GPT-style decoder: token and learned position embeddings, pre-LayerNorm blocks of causal
// self-attention (nn::MultiheadAttention, i.e. scaled_dot_product_attention with is_causal) and a
// GELU MLP, a final LayerNorm and a linear head over the vocabulary.
#include <cstdint>

#include <mixtrain/mixtrain.h>

namespace mixtrain::examples {

struct GptOptions {
  int64_t vocab = 256;   // bytes
  int64_t context = 64;  // longest sequence (learned positions)
  int64_t width = 128;
  int64_t layers = 4;
  int64_t heads = 4;
  double dropout = 0.0;  // attention and residual dropout
  // Recompute each block in backward instead of keeping its activations (nn::checkpoint): the
  // same gradients, bit for bit, for one more forward pass of the blocks.
  bool checkpoint_activations = false;

  // BERT-base's sizes (12 layers, width 768, 12 heads, MLP 3072) at context 128, for GPU
  // benchmarks. Causal, so unlike BERT not bidirectional: the cost per token is the same.
  static GptOptions bert_base() { return {256, 128, 768, 12, 12, 0.0, false}; }
};

// x + attn(ln1(x)), then x + fc2(gelu(fc1(ln2(x)))); the residual sums are written into the
// branch outputs where that gives the same result (see residual_add in gpt_model.cpp).
class GptBlockImpl : public nn::Module {
 public:
  explicit GptBlockImpl(const GptOptions& o);
  Tensor forward(const Tensor& x) override;

 private:
  nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  nn::MultiheadAttention attn_{nullptr};
  nn::Linear fc1_{nullptr}, fc2_{nullptr};
  nn::Dropout drop_{nullptr};
};
MT_MODULE(GptBlock);

class GptImpl : public nn::Module {
 public:
  explicit GptImpl(const GptOptions& options);
  // tokens: int64 [N, T] with T <= context -> logits [N, T, vocab]
  Tensor forward(const Tensor& tokens) override;
  const GptOptions& options() const { return options_; }
  // Parameters outside the embeddings (blocks, final LayerNorm and head), as GPT papers count.
  int64_t non_embedding_parameters() const;

 private:
  GptOptions options_;
  nn::Embedding tok_emb_{nullptr}, pos_emb_{nullptr};
  nn::ModuleList blocks_{nullptr};
  nn::LayerNorm ln_f_{nullptr};
  nn::Linear head_{nullptr};
};
MT_MODULE(Gpt);

}  // namespace mixtrain::examples
