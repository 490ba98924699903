// BatchNorm2d, GroupNorm, LayerNorm.
#include "mixtrain/nn/normalization.h"

#include <cmath>

#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/memory/trace.h"
#include "mixtrain/nn/init.h"
#include "nn/describe.h"

namespace mixtrain::nn {

namespace {
using detail::describe;
}  // namespace

BatchNorm2dImpl::BatchNorm2dImpl(const BatchNormOptions& options) : Module("BatchNorm2d"), options_(options) {
  MT_CHECK(options.num_features() > 0, "BatchNorm2d: num_features must be positive, got ", options.num_features());
  MT_CHECK(options.eps() >= 0, "BatchNorm2d: eps must be non-negative, got ", options.eps());
  MT_CHECK(!options.momentum() || (*options.momentum() >= 0 && *options.momentum() <= 1),
           "BatchNorm2d: momentum must be in [0, 1], got ", options.momentum().value_or(0));
  const int64_t c = options.num_features();
  if (options.affine()) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({c}), BufferCast::KeepFloat32);
    running_var = register_buffer("running_var", ones({c}), BufferCast::KeepFloat32);
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
}

void BatchNorm2dImpl::reset_running_stats() {
  if (!options_.track_running_stats()) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void BatchNorm2dImpl::reset_parameters() {
  reset_running_stats();
  if (!options_.affine()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor BatchNorm2dImpl::forward(const Tensor& input) {
  MT_CHECK(input.defined() && input.dim() == 4 && input.size(1) == options_.num_features(),
           "BatchNorm2d: expected input [N, ", options_.num_features(), ", H, W], got ", describe(input));
  // A checkpoint's recomputation (amp/recompute.h) normalizes with the batch's statistics as
  // the forward did, but leaves the running statistics and the count, already updated, alone.
  const bool recompute = is_training() && autograd::is_checkpoint_recompute();
  const bool tracking = options_.track_running_stats() && !recompute;
  double momentum = options_.momentum().value_or(0.0);
  if (is_training() && tracking) {
    NoGradGuard no_grad;
    // The count lives on the host too, so counting costs no device read. Integer add is not an op
    // here, so the buffer is rewritten with fill_; its version counter tells whether anything else
    // (load_state_dict, to(device)) wrote it since, and only then is it read back.
    if (num_batches_tracked.version() != tracked_version_) {
      if (num_batches_tracked.device().is_meta())  // no value to read: keep counting from the host's
        memory::note_assumption("BatchNorm2d: num_batches_tracked is on meta; the host count was kept");
      else
        tracked_ = num_batches_tracked.item<int64_t>();
    }
    num_batches_tracked.fill_(static_cast<double>(++tracked_));
    tracked_version_ = num_batches_tracked.version();
    if (!options_.momentum()) momentum = 1.0 / static_cast<double>(tracked_);
  }
  // Without running statistics, eval mode normalizes with the batch's own, as PyTorch does.
  const bool use_batch_stats = is_training() || !tracking;
  return functional::batch_norm(input, recompute ? Tensor() : running_mean, recompute ? Tensor() : running_var, weight,
                                bias, use_batch_stats, momentum, options_.eps());
}

GroupNormImpl::GroupNormImpl(const GroupNormOptions& options) : Module("GroupNorm"), options_(options) {
  MT_CHECK(options.num_groups() > 0 && options.num_channels() > 0 && options.num_channels() % options.num_groups() == 0,
           "GroupNorm: num_channels = ", options.num_channels(), " must be a positive multiple of num_groups = ",
           options.num_groups());
  MT_CHECK(options.eps() >= 0, "GroupNorm: eps must be non-negative, got ", options.eps());
  if (options.affine()) {
    weight = register_parameter("weight", ones({options.num_channels()}));
    bias = register_parameter("bias", zeros({options.num_channels()}));
  }
}

void GroupNormImpl::reset_parameters() {
  if (!options_.affine()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor GroupNormImpl::forward(const Tensor& input) {
  MT_CHECK(input.defined() && input.dim() >= 2 && input.size(1) == options_.num_channels(),
           "GroupNorm: expected input [N, ", options_.num_channels(), ", *], got ", describe(input));
  return functional::group_norm(input, options_.num_groups(), weight, bias, options_.eps());
}

LayerNormImpl::LayerNormImpl(const LayerNormOptions& options) : Module("LayerNorm"), options_(options) {
  const Shape& shape = options.normalized_shape();
  MT_CHECK(!shape.empty(), "LayerNorm: normalized_shape must not be empty");
  for (int64_t d : shape) MT_CHECK(d > 0, "LayerNorm: normalized_shape ", shape_str(shape), " must be positive");
  MT_CHECK(options.eps() >= 0, "LayerNorm: eps must be non-negative, got ", options.eps());
  if (options.elementwise_affine()) {
    weight = register_parameter("weight", ones(shape));
    if (options.bias()) bias = register_parameter("bias", zeros(shape));
  }
}

void LayerNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNormImpl::forward(const Tensor& input) {
  const Shape& shape = options_.normalized_shape();
  const auto n = static_cast<int64_t>(shape.size());
  bool ok = input.defined() && input.dim() >= n;
  for (int64_t i = 0; ok && i < n; ++i) ok = input.size(input.dim() - n + i) == shape[static_cast<size_t>(i)];
  MT_CHECK(ok, "LayerNorm: expected an input whose trailing dims are ", shape_str(shape), ", got ", describe(input));
  return functional::layer_norm(input, shape, weight, bias, options_.eps());
}

}  // namespace mixtrain::nn
