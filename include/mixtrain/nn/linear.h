#pragma once
// Linear (y = x W^T + b), Flatten and Identity.
#include <cstdint>
#include <memory>

#include "mixtrain/nn/module.h"

namespace mixtrain::nn {

class LinearOptions {
 public:
  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  LinearOptions& bias(bool b) { bias_ = b; return *this; }
  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  bool bias() const { return bias_; }

 private:
  int64_t in_features_;
  int64_t out_features_;
  bool bias_ = true;
};

// A Linear's FP8 scaling state (amp::Fp8Scaling, docs/FP8.md), one slot per cast tensor: 0 input,
// 1 weight, 2 grad output. The first three are the module's buffers, saved with it:
//   fp8_amax_history [history_len, 3]: row 0 this step's amaxes (accumulated), then earlier steps'
//   fp8_scale [3], fp8_scale_inv [3]: data = fp8(x * scale); the GEMMs multiply by scale_inv
// saturated counts this step's clamped values (not saved); generation grows with every change of
// the scales (an update, a load), so a cached fp8 weight knows when it is stale.
struct LinearFp8State {
  Tensor amax_history, scale, scale_inv;  // fp32
  Tensor saturated;                       // int64 [3]
  int64_t generation = 0;
};

// weight [out, in] and bias [out], fp32, initialised as PyTorch's nn.Linear:
// kaiming_uniform_(a = sqrt(5)) for the weight, i.e. U(-1/sqrt(in), 1/sqrt(in)), and the bias
// from the same range.
class LinearImpl : public Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = true)
      : LinearImpl(LinearOptions(in_features, out_features).bias(bias)) {}
  explicit LinearImpl(const LinearOptions& options);

  // Re-draws weight and bias from the default generator.
  void reset_parameters();
  Tensor forward(const Tensor& input) override;
  // relu(forward(input)) as one fused op (linear_relu): what Sequential runs for this module
  // followed by a ReLU.
  Tensor forward_relu(const Tensor& input);

  const LinearOptions& options() const { return options_; }

  // Gives the layer its FP8 scaling state (scales 1, empty history) on the weight's device, as
  // buffers; under amp::Fp8AutocastGuard it then runs in FP8. Called again: an Error unless
  // history_len is the same (the state is kept).
  void enable_fp8(int64_t history_len);
  LinearFp8State* fp8_state() { return fp8_.get(); }  // nullptr until enable_fp8
  const LinearFp8State* fp8_state() const { return fp8_.get(); }

  Tensor weight;
  Tensor bias;  // undefined when options.bias() is false

 private:
  void check_input(const Tensor& input) const;
  // The FP8 forward when amp's FP8 autocast applies to this call; undefined otherwise.
  Tensor fp8_forward(const Tensor& input);

  LinearOptions options_;
  std::shared_ptr<LinearFp8State> fp8_;
};
MT_MODULE(Linear);

// Flattens dims [start_dim, end_dim] into one (default: all but the batch dim).
class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& input) override;

 private:
  int64_t start_dim_;
  int64_t end_dim_;
};
MT_MODULE(Flatten);

class IdentityImpl : public Module {
 public:
  IdentityImpl() : Module("Identity") {}
  Tensor forward(const Tensor& input) override { return input; }
};
MT_MODULE(Identity);

}  // namespace mixtrain::nn
