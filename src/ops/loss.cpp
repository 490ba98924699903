// Losses (mixtrain::nn::functional).
#include "backends/loss.h"
#include "mixtrain/ops/nn_functional.h"
#include "ops/op_helpers.h"

namespace mixtrain::nn::functional {

using namespace mixtrain::ops;

namespace {
Tensor reduce(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::Mean: return mean(loss);
    case Reduction::Sum: return sum(loss);
    case Reduction::None: return loss;
  }
  return loss;
}

void check_same_shape(const char* op, const Tensor& input, const Tensor& target) {
  check_defined(op, input, "input");
  check_defined(op, target, "target");
  check_same_device(op, input, target);
  check_floating(op, input);
  check_floating(op, target);
  MT_CHECK(input.shape() == target.shape(), op, ": input ", describe(input), " and target ", describe(target),
           " must have the same shape");
}
}  // namespace

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  Tensor input = input_in, target = target_in;
  OpScope scope(OpId::mse_loss, {&input, &target});
  check_same_shape("mse_loss", input, target);
  return reduce(square(sub(input, target)), reduction);
}

Tensor nll_loss(const Tensor& logp_in, const Tensor& target, const CrossEntropyOptions& options) {
  Tensor logp = logp_in;
  OpScope scope(OpId::nll_loss, {&logp});
  check_defined("nll_loss", logp, "input");
  check_defined("nll_loss", target, "target");
  check_floating("nll_loss", logp);
  check_same_device("nll_loss", logp, target);
  MT_CHECK(target.dtype() == kInt64, "cross_entropy: target must hold int64 class indices, got ", describe(target));
  MT_CHECK(logp.dim() >= 2, "cross_entropy: input must be [N, C] or [N, C, d1, ...], got ", describe(logp));
  Shape expected = logp.shape();
  expected.erase(expected.begin() + 1);
  MT_CHECK(target.shape() == expected, "cross_entropy: target ", describe(target), " does not match input ",
           describe(logp), " (expected target shape ", shape_str(expected), ")");
  MT_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0,
           "cross_entropy: label_smoothing must be in [0, 1], got ", options.label_smoothing);
  const int64_t outer = logp.size(0), classes = logp.size(1);
  const int64_t inner = logp.numel() / std::max<int64_t>(1, outer * classes);
  Tensor lp = logp.contiguous();
  Tensor tc = target.contiguous();
  Tensor loss = new_empty({}, logp);
  Tensor count = new_empty({}, logp, kInt64);
  const backends::NllLossArgs args{options.ignore_index, options.label_smoothing};
  backends::nll_loss(logp, lp, tc, outer, classes, inner, args, loss, count);
  if (autograd::needs_grad({&logp})) {
    const Shape shape = logp.shape();
    const autograd::SavedTensor tc_s = autograd::saved(tc, "input 1 (target)");  // count: private
    autograd::record("NllLossBackward0", loss, {&logp}, [tc_s, count, shape, outer, classes, inner, args](const TensorList& g) {
      Tensor grad = Tensor::empty(shape, g[0].options());
      backends::nll_loss_backward(grad, tc_s, outer, classes, inner, args, g[0].contiguous(), count, grad);
      return TensorList{grad};
    });
  }
  return loss;
}

Tensor cross_entropy(const Tensor& input_in, const Tensor& target, const CrossEntropyOptions& options) {
  Tensor input = input_in;
  OpScope scope(OpId::cross_entropy, {&input});
  check_defined("cross_entropy", input, "input");
  check_floating("cross_entropy", input);
  MT_CHECK(input.dim() >= 2, "cross_entropy: input must be [N, C] or [N, C, d1, ...], got ", describe(input));
  return nll_loss(log_softmax(input, 1), target, options);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  Tensor input = input_in, target = target_in;
  OpScope scope(OpId::binary_cross_entropy_with_logits, {&input, &target});
  check_same_shape("binary_cross_entropy_with_logits", input, target);
  // max(x, 0) - x*y + log(1 + exp(-|x|)): never exponentiates a large positive number.
  Tensor loss = add(sub(relu(input), mul(input, target)), log(add(exp(neg(abs(input))), 1.0)));
  return reduce(loss, reduction);
}

Tensor binary_cross_entropy(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  Tensor input = input_in, target = target_in;
  OpScope scope(OpId::binary_cross_entropy, {&input, &target});
  check_same_shape("binary_cross_entropy", input, target);
  // PyTorch clamps each log at -100 so p = 0 or 1 gives a finite loss.
  const Tensor floor = full({}, -100.0, input.options());
  Tensor log_p = maximum(log(input), floor);
  Tensor log_q = maximum(log(rsub(input, 1.0)), floor);
  Tensor loss = neg(add(mul(target, log_p), mul(rsub(target, 1.0), log_q)));
  return reduce(loss, reduction);
}

}  // namespace mixtrain::nn::functional
