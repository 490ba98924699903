// Linear, Flatten.
#include "mixtrain/nn/linear.h"

#include <cmath>

#include "mixtrain/core/error.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/nn/init.h"
#include "mixtrain/ops/functional.h"

namespace mixtrain::nn {

LinearImpl::LinearImpl(const LinearOptions& options) : Module("Linear"), options_(options) {
  MT_CHECK(options.in_features() > 0 && options.out_features() > 0,
           "Linear: in_features and out_features must be positive, got ", options.in_features(), " and ",
           options.out_features());
  weight = register_parameter("weight", empty({options.out_features(), options.in_features()}));
  if (options.bias()) bias = register_parameter("bias", empty({options.out_features()}));
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  // a = sqrt(5) makes the kaiming bound gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in): PyTorch keeps
  // this for compatibility with its older uniform init, and users expect its numbers.
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(options_.in_features()));
    init::uniform_(bias, -bound, bound);
  }
}

void LinearImpl::check_input(const Tensor& input) const {
  MT_CHECK(input.defined() && input.dim() >= 1 && input.size(-1) == options_.in_features(),
           "Linear: expected an input whose last dim is in_features = ", options_.in_features(), ", got ",
           input.defined() ? input.summary() : std::string("an undefined tensor"));
}

Tensor LinearImpl::forward(const Tensor& input) {
  check_input(input);
  return linear(input, weight, bias);
}

Tensor LinearImpl::forward_relu(const Tensor& input) {
  check_input(input);
  return linear_relu(input, weight, bias);
}

Tensor FlattenImpl::forward(const Tensor& input) {
  MT_CHECK(input.defined(), "Flatten: got an undefined tensor");
  return input.flatten(start_dim_, end_dim_);
}

}  // namespace mixtrain::nn
