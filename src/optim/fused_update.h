#pragma once
// The optimizers' fused updates, run by the backend of the weight's device (CPU loops in
// src/backends/cpu/optim_step.cpp, CUDA kernels in kernels/optim.cu).
//
// Operands are dense tensors of one shape on one device, laid out as the weight (contiguous, or
// channels-last for a channels-last weight); a gradient in another layout is copied into it.
// `weight` and the state share a dtype (fp32 for a master copy, else the parameter's). `grad` has
// the weight's dtype or, for an fp32 master weight, may be the half parameter's fp16/bf16 gradient. `half_out`, when defined, is the half
// parameter refreshed from the updated fp32 weight (round to nearest even). `gate` (undefined
// tensors: none) lets the device skip the update (backends::StepGate).
#include <cstdint>

#include "backends/optim.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain::optim::detail {

using AdamArgs = backends::AdamArgs;
using StepGate = backends::StepGate;

// max_exp_avg_sq is undefined unless amsgrad.
void fused_adam(const Tensor& weight, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const Tensor& max_exp_avg_sq, const Tensor& half_out, const AdamArgs& args, const StepGate& gate);

using SgdArgs = backends::SgdArgs;

// momentum_buffer is undefined when momentum == 0.
void fused_sgd(const Tensor& weight, const Tensor& grad, const Tensor& momentum_buffer, const Tensor& half_out,
               const SgdArgs& args, const StepGate& gate);

}  // namespace mixtrain::optim::detail
