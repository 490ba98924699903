#pragma once
// nn-flavoured functional ops: losses, activations, dropout (mixtrain::nn::functional).
#include "mixtrain/ops/functional.h"

namespace mixtrain::nn::functional {

using mixtrain::gelu;
using mixtrain::linear;
using mixtrain::log_softmax;
using mixtrain::relu;
using mixtrain::sigmoid;
using mixtrain::softmax;
using mixtrain::tanh;

enum class Reduction { Mean, Sum, None };

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};
// input: [N, C] or [N, C, d1, ...] logits; target: int64 [N] or [N, d1, ...]. Mean over
// non-ignored targets.
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options = {});
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const CrossEntropyOptions& options = {});
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        Reduction reduction = Reduction::Mean);
// Unsafe under autocast (banned there, as in PyTorch): use binary_cross_entropy_with_logits.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

Tensor dropout(const Tensor& x, double p, bool training);

}  // namespace mixtrain::nn::functional
