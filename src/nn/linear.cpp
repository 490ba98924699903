// Linear, Flatten.
#include "mixtrain/nn/linear.h"

#include <cmath>

#include "mixtrain/base/error.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/nn/init.h"
#include "mixtrain/ops/functional.h"
#include "nn/linear_fp8_hook.h"

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

namespace detail {
namespace {
LinearFp8Hook g_fp8_hook = nullptr;
}  // namespace
void set_linear_fp8_hook(LinearFp8Hook hook) { g_fp8_hook = hook; }
}  // namespace detail

void LinearImpl::enable_fp8(int64_t history_len) {
  MT_CHECK(history_len >= 1, "Linear.enable_fp8: history_len must be >= 1, got ", history_len);
  if (fp8_) {
    MT_CHECK(fp8_->amax_history.size(0) == history_len, "Linear(", options_.in_features(), ", ",
             options_.out_features(), ").enable_fp8: the layer already has FP8 state with an amax history of ",
             fp8_->amax_history.size(0), " steps, not ", history_len);
    return;
  }
  auto s = std::make_shared<LinearFp8State>();
  const TensorOptions f32 = TensorOptions(kFloat32).device(weight.device());
  s->amax_history = register_buffer("fp8_amax_history", zeros({history_len, 3}, f32), BufferCast::KeepFloat32);
  s->scale = register_buffer("fp8_scale", ones({3}, f32), BufferCast::KeepFloat32);
  s->scale_inv = register_buffer("fp8_scale_inv", ones({3}, f32), BufferCast::KeepFloat32);
  s->saturated = zeros({3}, TensorOptions(kInt64).device(weight.device()));
  fp8_ = std::move(s);
}

Tensor LinearImpl::fp8_forward(const Tensor& input) {
  return fp8_ && detail::g_fp8_hook ? detail::g_fp8_hook(*this, input) : Tensor();
}

Tensor LinearImpl::forward(const Tensor& input) {
  check_input(input);
  if (Tensor y = fp8_forward(input); y.defined()) return y;
  return linear(input, weight, bias);
}

Tensor LinearImpl::forward_relu(const Tensor& input) {
  check_input(input);
  if (Tensor y = fp8_forward(input); y.defined()) return relu(y);
  return linear_relu(input, weight, bias);
}

Tensor FlattenImpl::forward(const Tensor& input) {
  MT_CHECK(input.defined(), "Flatten: got an undefined tensor");
  return input.flatten(start_dim_, end_dim_);
}

}  // namespace mixtrain::nn
