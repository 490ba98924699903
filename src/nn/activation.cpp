// Activation modules and Dropout.
#include "mixtrain/nn/activation.h"

#include "mixtrain/base/error.h"
#include "mixtrain/nn/functional.h"

namespace mixtrain::nn {

Tensor ReLUImpl::forward(const Tensor& input) {
  if (!options_.inplace()) return relu(input);
  Tensor self = input;
  return self.relu_();
}
Tensor GELUImpl::forward(const Tensor& input) { return gelu(input); }
Tensor TanhImpl::forward(const Tensor& input) { return mixtrain::tanh(input); }
Tensor SigmoidImpl::forward(const Tensor& input) { return sigmoid(input); }

DropoutImpl::DropoutImpl(double p) : DropoutImpl(DropoutOptions(p)) {}

DropoutImpl::DropoutImpl(const DropoutOptions& options)
    : Module("Dropout"), p_(options.p()), inplace_(options.inplace()) {
  MT_CHECK(p_ >= 0.0 && p_ <= 1.0, "Dropout: probability must be in [0, 1], got ", p_);
}

Tensor DropoutImpl::forward(const Tensor& input) { return functional::dropout(input, p_, is_training(), inplace_); }

}  // namespace mixtrain::nn
