#pragma once
// nn-flavoured functional ops: losses, activations, dropout, convolution, pooling, resampling,
// normalization, embedding and attention (mixtrain::nn::functional), with PyTorch's argument
// names, order and defaults. They are ops (src/ops implements them); users include them as
// mixtrain/nn/functional.h, which forwards here.
#include <optional>
#include <utility>

#include "mixtrain/ops/functional.h"

namespace mixtrain::nn {

// A (height, width) pair given as one number for both or as {h, w}, like PyTorch's int-or-tuple
// arguments: conv2d(x, w, b, /*stride=*/2, /*padding=*/{1, 0}).
struct IntPair {
  int64_t h, w;
  IntPair(int64_t v) : h(v), w(v) {}  // NOLINT(google-explicit-constructor): the int form is the point
  IntPair(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  bool operator==(const IntPair& o) const { return h == o.h && w == o.w; }
};

}  // namespace mixtrain::nn

namespace mixtrain::nn::functional {

using mixtrain::gelu;
using mixtrain::linear;
using mixtrain::log_softmax;
using mixtrain::relu;
using mixtrain::sigmoid;
using mixtrain::softmax;
using mixtrain::tanh;
// The unary ops with scalars of MT_UNARY_SCALARS are activations, F.softplus in PyTorch.
#define MT_SCALARS_UNARY(code, name, ...) using mixtrain::name;
MT_UNARY_SCALARS(MT_SCALARS_UNARY)
#undef MT_SCALARS_UNARY

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
// In place (PyTorch's inplace=True): the same values and draws as dropout(x, p, training), written
// into x; differentiable on a non-leaf (its grad_fn is rebased onto the dropout), an error on a
// leaf that requires grad under grad mode.
Tensor& dropout_(Tensor& x, double p, bool training);
Tensor dropout(const Tensor& x, double p, bool training, bool inplace);

// ---- Convolution. input [N, C, H, W]; weight [Cout, C / groups, kh, kw]; bias [Cout].
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), IntPair stride = 1,
              IntPair padding = 0, IntPair dilation = 1, int64_t groups = 1);
// weight [C, Cout / groups, kh, kw]; output size (H - 1) * stride - 2 * padding + dilation * (k - 1)
// + output_padding + 1 (output_padding < stride or < dilation picks among the sizes a strided
// conv2d maps to the same input size).
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), IntPair stride = 1,
                        IntPair padding = 0, IntPair output_padding = 0, int64_t groups = 1, IntPair dilation = 1);

// ---- Pooling. stride defaults to kernel_size (spell a pair as IntPair{2, 1} here: braces alone
// cannot initialize the optional); padding (at most half the kernel) reads -inf.
Tensor max_pool2d(const Tensor& input, IntPair kernel_size, std::optional<IntPair> stride = std::nullopt,
                  IntPair padding = 0, IntPair dilation = 1, bool ceil_mode = false);
// Also returns the argmax of each window as flat int64 positions h * W + w in its input plane.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntPair kernel_size,
                                                  std::optional<IntPair> stride = std::nullopt, IntPair padding = 0,
                                                  IntPair dilation = 1, bool ceil_mode = false);

// ---- Resampling of [N, C, H, W]: exactly one of size and scale_factor. With a scale factor the
// output is floor(H * scale) and source coordinates use 1 / scale, as PyTorch does when
// recompute_scale_factor is not set.
enum class InterpolateMode { Nearest, Bilinear };

class InterpolateOptions {
 public:
  InterpolateOptions& size(IntPair v) { size_ = v; return *this; }
  InterpolateOptions& scale_factor(double v) { return scale_factor(v, v); }
  InterpolateOptions& scale_factor(double h, double w) { scale_factor_ = std::make_pair(h, w); return *this; }
  InterpolateOptions& mode(InterpolateMode v) { mode_ = v; return *this; }
  // Bilinear only (PyTorch rejects it for nearest); default false.
  InterpolateOptions& align_corners(bool v) { align_corners_ = v; return *this; }

  const std::optional<IntPair>& size() const { return size_; }
  const std::optional<std::pair<double, double>>& scale_factor() const { return scale_factor_; }
  InterpolateMode mode() const { return mode_; }
  const std::optional<bool>& align_corners() const { return align_corners_; }

 private:
  std::optional<IntPair> size_;
  std::optional<std::pair<double, double>> scale_factor_;
  InterpolateMode mode_ = InterpolateMode::Nearest;
  std::optional<bool> align_corners_;
};

Tensor interpolate(const Tensor& input, const InterpolateOptions& options);
// The ops behind interpolate (ATen's names); scales are the scale factors, when given.
Tensor upsample_nearest2d(const Tensor& input, IntPair output_size, std::optional<double> scales_h = std::nullopt,
                          std::optional<double> scales_w = std::nullopt);
Tensor upsample_bilinear2d(const Tensor& input, IntPair output_size, bool align_corners,
                           std::optional<double> scales_h = std::nullopt, std::optional<double> scales_w = std::nullopt);

// ---- Normalization. input [N, C, *]. weight and bias may be undefined, of input's dtype, or fp32
// with an fp16/bf16 input (fp32 parameters of a model run in half). Statistics are computed in
// fp32 (fp64 for fp64 inputs) whatever the input dtype.
//
// training: normalize with the batch statistics and, when running_mean / running_var are
// defined, update them in place (momentum * batch + (1 - momentum) * running, unbiased
// variance), in their own dtype. Not training: normalize with the running statistics.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// Normalizes over the trailing dims given by normalized_shape; weight and bias have that shape.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// ---- Embedding. input: int64 indices of any shape; weight [V, D]; output [*input.shape, D].
// The row at padding_idx gets no gradient.
Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);

// ---- Attention. query [..., L, E], key [..., S, E], value [..., S, Ev] -> [..., L, Ev].
// attn_mask broadcasts to [..., L, S]: bool (true = attend) or additive float. is_causal masks
// key j > query i (and excludes attn_mask). scale defaults to 1 / sqrt(E). The softmax runs in
// fp32 for fp16/bf16 inputs. A query row whose keys are all masked out gives NaN, as PyTorch's
// math kernel. dropout_p applies to the attention weights whenever it is > 0 (no training flag,
// as in PyTorch: pass 0 in eval).
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

}  // namespace mixtrain::nn::functional

namespace mixtrain {
// PyTorch has these in the torch namespace too.
using nn::functional::batch_norm;
using nn::functional::conv2d;
using nn::functional::conv_transpose2d;
using nn::functional::embedding;
using nn::functional::group_norm;
using nn::functional::layer_norm;
using nn::functional::max_pool2d;
}  // namespace mixtrain
