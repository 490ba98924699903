#pragma once
// The fused Adam and SGD updates, written once for the CPU loops and the CUDA kernels: the per-step
// scalars, computed once on the host as PyTorch does (in double, then cast to the compute type C),
// and the update of one element. The parts that depend on the step count are also callable on
// the device: a gated update (StepGate in backends/optim.h) learns its step there, from the skip
// counter.
#include <math.h>

#include <cmath>

#include "backends/elementwise_math.h"
#include "backends/kernel_types.h"
#include "mixtrain/base/host_device.h"

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
MT_HOST_DEVICE void adam_set_step(AdamScalars<C>& s, const AdamArgs& a, int64_t step) {
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

// One element of Adam/AdamW in the operation order of PyTorch's single-tensor Adam (lerp_, mul_ +
// addcmul_, sqrt / bc2_sqrt + eps, addcdiv_): updates m, v (and vmax with amsgrad) and returns
// the new weight. Mode and the flags are template parameters so the CPU loop over elements has no
// branch and vectorizes; Mode 0: no weight decay, 1: L2 (Adam), 2: decoupled (AdamW).
template <int Mode, bool Amsgrad, bool LerpSmall, class C>
MT_HOST_DEVICE inline C adam_update(C p, C g, C& m, C& v, C& vmax, const AdamScalars<C>& s) {
  if constexpr (Mode == 2) p = p * s.decay;
  if constexpr (Mode == 1) g = g + s.wd * p;
  // torch.lerp: the formula depends on whether the weight is below 0.5, for accuracy.
  if constexpr (LerpSmall) m = m + s.w1 * (g - m);
  else m = g - (g - m) * s.one_minus_w1;
  C vi = v * s.beta2;
  vi = vi + s.one_minus_beta2 * g * g;
  v = vi;
  if constexpr (Amsgrad) {
    vi = (vmax < vi || vi != vi) ? vi : vmax;  // torch.maximum propagates NaN from either side
    vmax = vi;
  }
  const C denom = math::m_sqrt(vi) / s.bc2_sqrt + s.eps;
  return p + s.neg_step_size * (m / denom);
}

// adam_update with the mode and flags of s picked at run time (the CUDA kernel: one instantiation,
// a uniform branch per element).
template <class C>
MT_HOST_DEVICE inline C adam_update(C p, C g, C& m, C& v, C& vmax, const AdamScalars<C>& s) {
#define MT_ADAM_FLAGS(mode)                                                                  \
  if (s.amsgrad) return s.lerp_small ? adam_update<mode, true, true>(p, g, m, v, vmax, s)     \
                                     : adam_update<mode, true, false>(p, g, m, v, vmax, s);   \
  return s.lerp_small ? adam_update<mode, false, true>(p, g, m, v, vmax, s)                   \
                      : adam_update<mode, false, false>(p, g, m, v, vmax, s);
  if (s.mode == 0) { MT_ADAM_FLAGS(0) }
  if (s.mode == 1) { MT_ADAM_FLAGS(1) }
  MT_ADAM_FLAGS(2)
#undef MT_ADAM_FLAGS
}

template <class C>
struct SgdScalars {
  C wd, momentum, one_minus_dampening, neg_lr;
  int mom;  // 0 no momentum, 1 first step (buf = g), 2 running buffer
  bool weight_decay, nesterov;
};

// 0 no momentum, 1 initialise the buffer (buf = g), 2 running buffer. Step 1 initialises too, so
// a gated first step that was skipped initialises on the step actually taken.
MT_HOST_DEVICE inline int sgd_momentum_mode(const SgdArgs& a, int64_t step) {
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

// One element of SGD in PyTorch's order: weight decay, momentum buffer (Mom 0: none, 1: first
// step, buf = g, 2: running), Nesterov, then w - lr * g. Updates buf; returns the new weight.
template <bool WeightDecay, int Mom, bool Nesterov, class C>
MT_HOST_DEVICE inline C sgd_update(C w, C g, C& buf, const SgdScalars<C>& s) {
  if constexpr (WeightDecay) g = g + s.wd * w;
  if constexpr (Mom == 1) buf = g;
  if constexpr (Mom == 2) buf = buf * s.momentum + s.one_minus_dampening * g;
  if constexpr (Mom != 0) g = Nesterov ? g + s.momentum * buf : buf;
  return w + s.neg_lr * g;
}

// sgd_update with the flags of s picked at run time.
template <class C>
MT_HOST_DEVICE inline C sgd_update(C w, C g, C& buf, const SgdScalars<C>& s) {
#define MT_SGD_MOM(wd)                                                                           \
  if (s.mom == 0) return sgd_update<wd, 0, false>(w, g, buf, s);                                 \
  if (s.mom == 1) return s.nesterov ? sgd_update<wd, 1, true>(w, g, buf, s) : sgd_update<wd, 1, false>(w, g, buf, s); \
  return s.nesterov ? sgd_update<wd, 2, true>(w, g, buf, s) : sgd_update<wd, 2, false>(w, g, buf, s);
  if (s.weight_decay) { MT_SGD_MOM(true) }
  MT_SGD_MOM(false)
#undef MT_SGD_MOM
}

}  // namespace mixtrain::backends
