#pragma once
// Embedding: a lookup table [num_embeddings, embedding_dim], drawn from N(0, 1) as in PyTorch,
// with the padding_idx row zeroed and excluded from gradients.
#include <cstdint>
#include <optional>

#include "mixtrain/nn/module.h"

namespace mixtrain::nn {

class EmbeddingOptions {
 public:
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  // Negative values count from the end, as in PyTorch.
  EmbeddingOptions& padding_idx(std::optional<int64_t> v) { padding_idx_ = v; return *this; }
  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t embedding_dim() const { return embedding_dim_; }
  const std::optional<int64_t>& padding_idx() const { return padding_idx_; }

 private:
  int64_t num_embeddings_, embedding_dim_;
  std::optional<int64_t> padding_idx_;
};

class EmbeddingImpl : public Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingImpl(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  explicit EmbeddingImpl(const EmbeddingOptions& options);

  void reset_parameters();
  // indices: int64 of any shape, each in [0, num_embeddings); output [*indices.shape, embedding_dim].
  Tensor forward(const Tensor& indices) override;
  const EmbeddingOptions& options() const { return options_; }
  // padding_idx normalised to [0, num_embeddings), if any.
  std::optional<int64_t> padding_idx() const { return padding_idx_; }

  Tensor weight;

 private:
  EmbeddingOptions options_;
  std::optional<int64_t> padding_idx_;
};
MT_MODULE(Embedding);

}  // namespace mixtrain::nn
