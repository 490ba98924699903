// Embedding.
#include "mixtrain/nn/embedding.h"

#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/nn/functional.h"
#include "mixtrain/nn/init.h"

namespace mixtrain::nn {

EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& options) : Module("Embedding"), options_(options) {
  const int64_t n = options.num_embeddings();
  MT_CHECK(n > 0 && options.embedding_dim() > 0, "Embedding: num_embeddings and embedding_dim must be positive, got ",
           n, " and ", options.embedding_dim());
  if (options.padding_idx()) {
    const int64_t p = *options.padding_idx();
    MT_CHECK(p >= -n && p < n, "Embedding: padding_idx = ", p, " must be within num_embeddings = ", n);
    padding_idx_ = p < 0 ? p + n : p;
  }
  weight = register_parameter("weight", empty({n, options.embedding_dim()}));
  reset_parameters();
}

void EmbeddingImpl::reset_parameters() {
  init::normal_(weight);
  if (padding_idx_) {
    NoGradGuard no_grad;
    weight.select(0, *padding_idx_).zero_();
  }
}

Tensor EmbeddingImpl::forward(const Tensor& indices) {
  MT_CHECK(indices.defined() && indices.dtype() == kInt64, "Embedding: expected int64 indices, got ",
           indices.defined() ? indices.summary() : std::string("an undefined tensor"));
  return functional::embedding(indices, weight, padding_idx_);
}

}  // namespace mixtrain::nn
