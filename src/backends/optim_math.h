#pragma once
// The per-step scalars of the fused Adam and SGD updates, computed once on the host as PyTorch
// does (in double, then cast to the compute type C), for the CPU loops and the CUDA kernels alike.
// The parts that depend on the step count are also callable on the device: a gated update
// (StepGate in backends/optim.h) learns its step there, from the skip counter.
#include <math.h>

#include <cmath>

#include "backends/kernel_types.h"

#if defined(__CUDACC__)
#define MT_OPTIM_HOST_DEVICE __host__ __device__
#else
#define MT_OPTIM_HOST_DEVICE
#endif

namespace mixtrain::backends {

template <class C>
struct AdamScalars {
  C decay, wd, w1, one_minus_w1, beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size;
  int mode;         // 0 no weight decay, 1 L2 (Adam), 2 decoupled (AdamW)
  bool amsgrad;
  bool lerp_small;  // torch.lerp's formula for a weight below 0.5
};

// The bias corrections of step `step` (counted from 1).
template <class C>
MT_OPTIM_HOST_DEVICE void adam_set_step(AdamScalars<C>& s, const AdamArgs& a, int64_t step) {
  const double bc1 = 1.0 - ::pow(a.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - ::pow(a.beta2, static_cast<double>(step));
  s.bc2_sqrt = static_cast<C>(::sqrt(bc2));
  s.neg_step_size = static_cast<C>(-(a.lr / bc1));
}

template <class C>
AdamScalars<C> adam_scalars(const AdamArgs& a) {
  const double w1 = 1.0 - a.beta1;
  AdamScalars<C> s;
  s.decay = static_cast<C>(1.0 - a.lr * a.weight_decay);
  s.wd = static_cast<C>(a.weight_decay);
  s.w1 = static_cast<C>(w1);
  s.one_minus_w1 = static_cast<C>(1.0 - w1);
  s.beta2 = static_cast<C>(a.beta2);
  s.one_minus_beta2 = static_cast<C>(1.0 - a.beta2);
  s.eps = static_cast<C>(a.eps);
  adam_set_step(s, a, a.step);
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

// 0 no momentum, 1 initialise the buffer (buf = g), 2 running buffer. Step 1 initialises too, so
// a gated first step that was skipped initialises on the step actually taken.
MT_OPTIM_HOST_DEVICE inline int sgd_momentum_mode(const SgdArgs& a, int64_t step) {
  return a.momentum == 0.0 ? 0 : (a.first_step || step == 1 ? 1 : 2);
}

template <class C>
SgdScalars<C> sgd_scalars(const SgdArgs& a) {
  SgdScalars<C> s;
  s.wd = static_cast<C>(a.weight_decay);
  s.momentum = static_cast<C>(a.momentum);
  s.one_minus_dampening = static_cast<C>(1.0 - a.dampening);
  s.neg_lr = static_cast<C>(-a.lr);
  s.mom = sgd_momentum_mode(a, a.step);
  s.weight_decay = a.weight_decay != 0.0;
  s.nesterov = a.nesterov;
  return s;
}

}  // namespace mixtrain::backends
