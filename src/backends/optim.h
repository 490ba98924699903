#pragma once
// The optim family's kernels: the optimizers' fused element-wise updates (optim/fused_update.cpp).
// One pass reads weight, grad and state and writes them back. weight and the state tensors
// share a dtype; grad has the weight's dtype or, for an fp32 master weight, the half parameter's;
// half_out (may be undefined) receives the updated weight rounded to its half dtype. All
// contiguous, one shape, on the kernel's device.
#include "backends/kernel.h"
#include "backends/kernel_types.h"

namespace mixtrain::backends {

// Lets a fused update decide on the device whether to run, so that GradScaler needs no host
// synchronisation (optim::Optimizer::step(found_inf)). When found_inf (0-dim fp32) is nonzero
// the update changes nothing but skipped_steps (0-dim int32), which it increments once. Otherwise
// it runs as step args.step - skipped_steps: args.step counts the attempts, the counter the skips.
// Both undefined: an ordinary update. skipped_steps alone: an ordinary update whose step count
// is corrected by the skips so far.
struct StepGate {
  Tensor found_inf;
  Tensor skipped_steps;
};

MT_KERNEL(optim, adam_step,
          void(const Tensor& weight, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const Tensor& max_exp_avg_sq, const Tensor& half_out, const AdamArgs& args, const StepGate& gate));
MT_KERNEL(optim, sgd_step,
          void(const Tensor& weight, const Tensor& grad, const Tensor& momentum_buffer, const Tensor& half_out,
               const SgdArgs& args, const StepGate& gate));

}  // namespace mixtrain::backends
