#pragma once
// Linear (y = x W^T + b), Flatten and Identity.
#include <cstdint>

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

  Tensor weight;
  Tensor bias;  // undefined when options.bias() is false

 private:
  void check_input(const Tensor& input) const;

  LinearOptions options_;
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
