// Conv2d and ConvTranspose2d.
#include "mixtrain/nn/conv.h"

#include <cmath>

#include "mixtrain/base/error.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/nn/init.h"

namespace mixtrain::nn {

namespace {

void check_options(const char* who, const ConvOptions& o, bool transposed) {
  MT_CHECK(o.in_channels() > 0 && o.out_channels() > 0, who, ": in_channels and out_channels must be positive, got ",
           o.in_channels(), " and ", o.out_channels());
  MT_CHECK(o.groups() > 0 && o.in_channels() % o.groups() == 0 && o.out_channels() % o.groups() == 0, who,
           ": groups = ", o.groups(), " must divide in_channels = ", o.in_channels(), " and out_channels = ",
           o.out_channels());
  MT_CHECK(o.kernel_size().h > 0 && o.kernel_size().w > 0, who, ": kernel_size must be positive, got (",
           o.kernel_size().h, ", ", o.kernel_size().w, ")");
  MT_CHECK(o.stride().h > 0 && o.stride().w > 0, who, ": stride must be positive, got (", o.stride().h, ", ",
           o.stride().w, ")");
  MT_CHECK(o.dilation().h > 0 && o.dilation().w > 0, who, ": dilation must be positive, got (", o.dilation().h, ", ",
           o.dilation().w, ")");
  MT_CHECK(o.padding().h >= 0 && o.padding().w >= 0, who, ": padding must be non-negative, got (", o.padding().h,
           ", ", o.padding().w, ")");
  MT_CHECK(transposed || (o.output_padding().h == 0 && o.output_padding().w == 0), who,
           ": output_padding applies to ConvTranspose2d only");
}

// PyTorch's _ConvNd.reset_parameters: both the weight bound (kaiming with a = sqrt(5)) and the
// bias bound come out as 1 / sqrt(fan_in), fan_in computed from the weight's shape.
void reset_conv(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

void check_input(const char* who, const Tensor& input, int64_t channels) {
  MT_CHECK(input.defined() && input.dim() == 4 && input.size(1) == channels, who, ": expected input [N, ", channels,
           ", H, W], got ", input.defined() ? input.summary() : std::string("an undefined tensor"));
}

}  // namespace

Conv2dImpl::Conv2dImpl(const ConvOptions& options) : Module("Conv2d"), options_(options) {
  check_options("Conv2d", options, false);
  const IntPair k = options.kernel_size();
  weight = register_parameter("weight", empty({options.out_channels(), options.in_channels() / options.groups(), k.h, k.w}));
  if (options.bias()) bias = register_parameter("bias", empty({options.out_channels()}));
  reset_parameters();
}

void Conv2dImpl::reset_parameters() { reset_conv(weight, bias); }

Tensor Conv2dImpl::forward(const Tensor& input) {
  check_input("Conv2d", input, options_.in_channels());
  return functional::conv2d(input, weight, bias, options_.stride(), options_.padding(), options_.dilation(),
                            options_.groups());
}

ConvTranspose2dImpl::ConvTranspose2dImpl(const ConvOptions& options) : Module("ConvTranspose2d"), options_(options) {
  check_options("ConvTranspose2d", options, true);
  const IntPair k = options.kernel_size();
  weight = register_parameter("weight", empty({options.in_channels(), options.out_channels() / options.groups(), k.h, k.w}));
  if (options.bias()) bias = register_parameter("bias", empty({options.out_channels()}));
  reset_parameters();
}

void ConvTranspose2dImpl::reset_parameters() { reset_conv(weight, bias); }

Tensor ConvTranspose2dImpl::forward(const Tensor& input) {
  check_input("ConvTranspose2d", input, options_.in_channels());
  return functional::conv_transpose2d(input, weight, bias, options_.stride(), options_.padding(),
                                      options_.output_padding(), options_.groups(), options_.dilation());
}

}  // namespace mixtrain::nn
