#pragma once
// BatchNorm2d, GroupNorm and LayerNorm, with PyTorch's parameter and buffer names ("weight",
// "bias", "running_mean", "running_var", "num_batches_tracked") and defaults.
#include <cstdint>
#include <optional>
#include <utility>

#include "mixtrain/nn/functional.h"
#include "mixtrain/nn/module.h"

namespace mixtrain::nn {

class BatchNormOptions {
 public:
  explicit BatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  BatchNormOptions& eps(double v) { eps_ = v; return *this; }
  // nullopt: a cumulative moving average (momentum 1 / num_batches_tracked), as PyTorch's None.
  BatchNormOptions& momentum(std::optional<double> v) { momentum_ = v; return *this; }
  BatchNormOptions& affine(bool v) { affine_ = v; return *this; }
  BatchNormOptions& track_running_stats(bool v) { track_running_stats_ = v; return *this; }

  int64_t num_features() const { return num_features_; }
  double eps() const { return eps_; }
  std::optional<double> momentum() const { return momentum_; }
  bool affine() const { return affine_; }
  bool track_running_stats() const { return track_running_stats_; }

 private:
  int64_t num_features_;
  double eps_ = 1e-5;
  std::optional<double> momentum_ = 0.1;
  bool affine_ = true;
  bool track_running_stats_ = true;
};

// Input [N, C, H, W]. Training: normalizes with the batch statistics and updates the running
// ones; eval: normalizes with the running ones. The running statistics are fp32 buffers that
// stay fp32 when the module is cast to fp16/bf16 (BufferCast::KeepFloat32), so a half model
// still accumulates them accurately; num_batches_tracked is an int64 scalar.
class BatchNorm2dImpl : public Module {
 public:
  explicit BatchNorm2dImpl(int64_t num_features) : BatchNorm2dImpl(BatchNormOptions(num_features)) {}
  explicit BatchNorm2dImpl(const BatchNormOptions& options);

  void reset_running_stats();
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  const BatchNormOptions& options() const { return options_; }

  Tensor weight, bias;                 // [C]; undefined when not affine
  Tensor running_mean, running_var;    // [C] fp32; undefined when not tracking
  Tensor num_batches_tracked;          // int64 scalar; undefined when not tracking

 private:
  BatchNormOptions options_;
  int64_t tracked_ = 0;                        // host copy of num_batches_tracked
  uint64_t tracked_version_ = ~uint64_t{0};    // its version when tracked_ was last in step
};
MT_MODULE(BatchNorm2d);

class GroupNormOptions {
 public:
  GroupNormOptions(int64_t num_groups, int64_t num_channels) : num_groups_(num_groups), num_channels_(num_channels) {}
  GroupNormOptions& eps(double v) { eps_ = v; return *this; }
  GroupNormOptions& affine(bool v) { affine_ = v; return *this; }
  int64_t num_groups() const { return num_groups_; }
  int64_t num_channels() const { return num_channels_; }
  double eps() const { return eps_; }
  bool affine() const { return affine_; }

 private:
  int64_t num_groups_, num_channels_;
  double eps_ = 1e-5;
  bool affine_ = true;
};

// Input [N, C, *]; statistics over each group of C / num_groups channels and the spatial dims.
class GroupNormImpl : public Module {
 public:
  GroupNormImpl(int64_t num_groups, int64_t num_channels) : GroupNormImpl(GroupNormOptions(num_groups, num_channels)) {}
  explicit GroupNormImpl(const GroupNormOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  const GroupNormOptions& options() const { return options_; }

  Tensor weight, bias;  // [C]; undefined when not affine

 private:
  GroupNormOptions options_;
};
MT_MODULE(GroupNorm);

class LayerNormOptions {
 public:
  LayerNormOptions(Shape normalized_shape) : normalized_shape_(std::move(normalized_shape)) {}  // NOLINT: LayerNorm({768})
  LayerNormOptions& eps(double v) { eps_ = v; return *this; }
  LayerNormOptions& elementwise_affine(bool v) { elementwise_affine_ = v; return *this; }
  LayerNormOptions& bias(bool v) { bias_ = v; return *this; }
  const Shape& normalized_shape() const { return normalized_shape_; }
  double eps() const { return eps_; }
  bool elementwise_affine() const { return elementwise_affine_; }
  bool bias() const { return bias_; }

 private:
  Shape normalized_shape_;
  double eps_ = 1e-5;
  bool elementwise_affine_ = true;
  bool bias_ = true;
};

// Normalizes over the trailing dims normalized_shape; weight (ones) and bias (zeros) have that shape.
class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(Shape normalized_shape) : LayerNormImpl(LayerNormOptions(std::move(normalized_shape))) {}
  explicit LayerNormImpl(const LayerNormOptions& options);
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  const LayerNormOptions& options() const { return options_; }

  Tensor weight, bias;  // undefined when not elementwise_affine (bias also when bias(false))

 private:
  LayerNormOptions options_;
};
MT_MODULE(LayerNorm);

}  // namespace mixtrain::nn
