#pragma once
// Conv2d and ConvTranspose2d: modules over nn::functional::conv2d / conv_transpose2d, with
// PyTorch's parameter shapes, names ("weight", "bias") and default initialisation.
#include <cstdint>

#include "mixtrain/nn/functional.h"
#include "mixtrain/nn/module.h"

namespace mixtrain::nn {

// Options shared by both convolutions; output_padding matters to the transposed one only.
class ConvOptions {
 public:
  ConvOptions(int64_t in_channels, int64_t out_channels, IntPair kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  ConvOptions& stride(IntPair v) { stride_ = v; return *this; }
  ConvOptions& padding(IntPair v) { padding_ = v; return *this; }
  ConvOptions& output_padding(IntPair v) { output_padding_ = v; return *this; }
  ConvOptions& dilation(IntPair v) { dilation_ = v; return *this; }
  ConvOptions& groups(int64_t v) { groups_ = v; return *this; }
  ConvOptions& bias(bool v) { bias_ = v; return *this; }

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  IntPair kernel_size() const { return kernel_size_; }
  IntPair stride() const { return stride_; }
  IntPair padding() const { return padding_; }
  IntPair output_padding() const { return output_padding_; }
  IntPair dilation() const { return dilation_; }
  int64_t groups() const { return groups_; }
  bool bias() const { return bias_; }

 private:
  int64_t in_channels_, out_channels_;
  IntPair kernel_size_;
  IntPair stride_ = 1, padding_ = 0, output_padding_ = 0, dilation_ = 1;
  int64_t groups_ = 1;
  bool bias_ = true;
};
using Conv2dOptions = ConvOptions;
using ConvTranspose2dOptions = ConvOptions;

// weight [out, in / groups, kh, kw], bias [out]; input [N, in, H, W].
// Initialised as PyTorch: kaiming_uniform_(a = sqrt(5)) on the weight, i.e. U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)) with fan_in = in / groups * kh * kw, and the bias from the same range.
class Conv2dImpl : public Module {
 public:
  Conv2dImpl(int64_t in_channels, int64_t out_channels, IntPair kernel_size)
      : Conv2dImpl(ConvOptions(in_channels, out_channels, kernel_size)) {}
  explicit Conv2dImpl(const ConvOptions& options);

  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  const ConvOptions& options() const { return options_; }

  Tensor weight;
  Tensor bias;  // undefined without bias

 private:
  ConvOptions options_;
};
MT_MODULE(Conv2d);

// weight [in, out / groups, kh, kw] (PyTorch's layout for the transposed convolution), bias
// [out]. Initialised as PyTorch does, which computes fan_in from that weight shape:
// out / groups * kh * kw.
class ConvTranspose2dImpl : public Module {
 public:
  ConvTranspose2dImpl(int64_t in_channels, int64_t out_channels, IntPair kernel_size)
      : ConvTranspose2dImpl(ConvOptions(in_channels, out_channels, kernel_size)) {}
  explicit ConvTranspose2dImpl(const ConvOptions& options);

  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  const ConvOptions& options() const { return options_; }

  Tensor weight;
  Tensor bias;

 private:
  ConvOptions options_;
};
MT_MODULE(ConvTranspose2d);

}  // namespace mixtrain::nn
