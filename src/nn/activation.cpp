// Activation modules and Dropout.
#include "mixtrain/nn/activation.h"

#include "mixtrain/core/error.h"
#include "mixtrain/nn/functional.h"

namespace mixtrain::nn {

Tensor ReLUImpl::forward(const Tensor& input) { return relu(input); }
Tensor GELUImpl::forward(const Tensor& input) { return gelu(input); }
Tensor TanhImpl::forward(const Tensor& input) { return mixtrain::tanh(input); }
Tensor SigmoidImpl::forward(const Tensor& input) { return sigmoid(input); }

DropoutImpl::DropoutImpl(double p) : Module("Dropout"), p_(p) {
  MT_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability must be in [0, 1], got ", p);
}

Tensor DropoutImpl::forward(const Tensor& input) { return functional::dropout(input, p_, is_training()); }

}  // namespace mixtrain::nn
