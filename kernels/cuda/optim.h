#pragma once
// The optim family's launchers (optim.cu), called by backends/cuda/optim.cpp;
// what every launcher takes and does: launch_args.h.
#include "kernels/cuda/launch_args.h"

namespace mixtrain::kernels {

// weight/state dtype `w`, grad dtype `g`, half_out dtype `h` (ignored when null).
// found_inf / skipped_steps: a backends::StepGate's tensors, or null.
void adam_step(DType w, DType g, DType h, void* weight, const void* grad, void* exp_avg, void* exp_avg_sq,
               void* max_exp_avg_sq, void* half_out, int64_t n, const backends::AdamArgs& args,
               const float* found_inf, int32_t* skipped_steps, cudaStream_t stream);
void sgd_step(DType w, DType g, DType h, void* weight, const void* grad, void* momentum_buffer, void* half_out,
              int64_t n, const backends::SgdArgs& args, const float* found_inf, int32_t* skipped_steps,
              cudaStream_t stream);

}  // namespace mixtrain::kernels
