#pragma once
// The per-step scalars of the fused Adam and SGD updates, computed once on the host as PyTorch
// does (in double, then cast to the compute type C), for the CPU loops and the CUDA kernels alike.
#include <cmath>

#include "backends/kernel_types.h"

namespace mixtrain::backends {

template <class C>
struct AdamScalars {
  C decay, wd, w1, one_minus_w1, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;
  int mode;         // 0 no weight decay, 1 L2 (Adam), 2 decoupled (AdamW)
  bool amsgrad;
  bool lerp_small;  // torch.lerp's formula for a weight below 0.5
};

template <class C>
AdamScalars<C> adam_scalars(const AdamArgs& a) {
  const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
  const double w1 = 1.0 - a.beta1;
  AdamScalars<C> s;
  s.decay = static_cast<C>(1.0 - a.lr * a.weight_decay);
  s.wd = static_cast<C>(a.weight_decay);
  s.w1 = static_cast<C>(w1);
  s.one_minus_w1 = static_cast<C>(1.0 - w1);
  s.beta2 = static_cast<C>(a.beta2);
  s.one_minus_beta2 = static_cast<C>(1.0 - a.beta2);
  s.bc2_sqrt = static_cast<C>(std::sqrt(bc2));
  s.eps = static_cast<C>(a.eps);
  s.neg_step_size = static_cast<C>(-(a.lr / bc1));
  s.mode = a.weight_decay == 0.0 ? 0 : (a.decoupled ? 2 : 1);
  s.amsgrad = a.amsgrad;
  s.lerp_small = std::abs(w1) < 0.5;
  return s;
}

template <class C>
struct SgdScalars {
  C wd, momentum, one_minus_dampening, neg_lr;
  int mom;  // 0 no momentum, 1 first step (buf = g), 2 running buffer
  bool weight_decay, nesterov;
};

template <class C>
SgdScalars<C> sgd_scalars(const SgdArgs& a) {
  SgdScalars<C> s;
  s.wd = static_cast<C>(a.weight_decay);
  s.momentum = static_cast<C>(a.momentum);
  s.one_minus_dampening = static_cast<C>(1.0 - a.dampening);
  s.neg_lr = static_cast<C>(-a.lr);
  s.mom = a.momentum == 0.0 ? 0 : (a.first_step ? 1 : 2);
  s.weight_decay = a.weight_decay != 0.0;
  s.nesterov = a.nesterov;
  return s;
}

}  // namespace mixtrain::backends
