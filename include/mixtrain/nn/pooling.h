#pragma once
// MaxPool2d and Upsample: parameter-free modules over the functional ops.
#include <optional>

#include "mixtrain/nn/functional.h"
#include "mixtrain/nn/module.h"

namespace mixtrain::nn {

class MaxPool2dOptions {
 public:
  explicit MaxPool2dOptions(IntPair kernel_size) : kernel_size_(kernel_size) {}
  MaxPool2dOptions& stride(IntPair v) { stride_ = v; return *this; }
  MaxPool2dOptions& padding(IntPair v) { padding_ = v; return *this; }
  MaxPool2dOptions& dilation(IntPair v) { dilation_ = v; return *this; }
  MaxPool2dOptions& ceil_mode(bool v) { ceil_mode_ = v; return *this; }

  IntPair kernel_size() const { return kernel_size_; }
  const std::optional<IntPair>& stride() const { return stride_; }  // default: kernel_size
  IntPair padding() const { return padding_; }
  IntPair dilation() const { return dilation_; }
  bool ceil_mode() const { return ceil_mode_; }

 private:
  IntPair kernel_size_;
  std::optional<IntPair> stride_;
  IntPair padding_ = 0, dilation_ = 1;
  bool ceil_mode_ = false;
};

class MaxPool2dImpl : public Module {
 public:
  explicit MaxPool2dImpl(IntPair kernel_size) : MaxPool2dImpl(MaxPool2dOptions(kernel_size)) {}
  explicit MaxPool2dImpl(const MaxPool2dOptions& options) : Module("MaxPool2d"), options_(options) {}
  Tensor forward(const Tensor& input) override;
  const MaxPool2dOptions& options() const { return options_; }

 private:
  MaxPool2dOptions options_;
};
MT_MODULE(MaxPool2d);

// Upsample(InterpolateOptions().scale_factor(2)): interpolate() as a module.
class UpsampleImpl : public Module {
 public:
  explicit UpsampleImpl(const functional::InterpolateOptions& options) : Module("Upsample"), options_(options) {}
  Tensor forward(const Tensor& input) override { return functional::interpolate(input, options_); }
  const functional::InterpolateOptions& options() const { return options_; }

 private:
  functional::InterpolateOptions options_;
};
MT_MODULE(Upsample);

}  // namespace mixtrain::nn
