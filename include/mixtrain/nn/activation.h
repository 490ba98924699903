#pragma once
// Activation modules and Dropout: stateless wrappers over the functional ops.
#include "mixtrain/nn/module.h"

namespace mixtrain::nn {

class ReLUImpl : public Module {
 public:
  ReLUImpl() : Module("ReLU") {}
  Tensor forward(const Tensor& input) override;
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
class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(double p = 0.5);
  Tensor forward(const Tensor& input) override;
  double p() const { return p_; }

 private:
  double p_;
};
MT_MODULE(Dropout);

}  // namespace mixtrain::nn
