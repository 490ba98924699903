#pragma once
// Activation modules and Dropout: stateless wrappers over the functional ops.
#include "mixtrain/nn/module.h"

namespace mixtrain::nn {

struct ReLUOptions {
  ReLUOptions() = default;
  // inplace: write the result into the input (x.relu_()), saving the output's memory; safe when
  // nothing else saved the input for backward (else backward raises), see docs/MEMORY.md.
  ReLUOptions& inplace(bool v) { inplace_ = v; return *this; }
  bool inplace() const { return inplace_; }

 private:
  bool inplace_ = false;
};

class ReLUImpl : public Module {
 public:
  explicit ReLUImpl(const ReLUOptions& options = {}) : Module("ReLU"), options_(options) {}
  Tensor forward(const Tensor& input) override;
  const ReLUOptions& options() const { return options_; }

 private:
  ReLUOptions options_;
};
MT_MODULE(ReLU);

// The exact (erf) form, PyTorch's default approximate='none'.
class GELUImpl : public Module {
 public:
  GELUImpl() : Module("GELU") {}
  Tensor forward(const Tensor& input) override;
};
MT_MODULE(GELU);

class TanhImpl : public Module {
 public:
  TanhImpl() : Module("Tanh") {}
  Tensor forward(const Tensor& input) override;
};
MT_MODULE(Tanh);

class SigmoidImpl : public Module {
 public:
  SigmoidImpl() : Module("Sigmoid") {}
  Tensor forward(const Tensor& input) override;
};
MT_MODULE(Sigmoid);

// In training mode zeroes each element with probability p and scales the rest by 1 / (1 - p);
// in eval mode it is the identity.
struct DropoutOptions {
  explicit DropoutOptions(double p = 0.5) : p_(p) {}
  DropoutOptions& p(double v) { p_ = v; return *this; }
  // inplace: mask the input itself (functional::dropout_); same values and draws as out of place.
  DropoutOptions& inplace(bool v) { inplace_ = v; return *this; }
  double p() const { return p_; }
  bool inplace() const { return inplace_; }

 private:
  double p_;
  bool inplace_ = false;
};

class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(double p = 0.5);
  explicit DropoutImpl(const DropoutOptions& options);
  Tensor forward(const Tensor& input) override;
  double p() const { return p_; }
  bool inplace() const { return inplace_; }

 private:
  double p_;
  bool inplace_ = false;
};
MT_MODULE(Dropout);

}  // namespace mixtrain::nn
