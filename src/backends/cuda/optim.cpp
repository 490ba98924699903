// Host side of the optimizers' fused updates on CUDA. The operands arrive checked (device, shape,
// contiguity) by the optimizers (src/optim/fused_update.cpp).
#include "backends/optim.h"
#include "backends/cuda/context.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/operands.h"
#include "kernels/cuda/optim.h"

namespace mixtrain::backends::cuda {

void adam_step(const Tensor& weight, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                            const Tensor& max_exp_avg_sq, const Tensor& half_out, const AdamArgs& args,
                            const StepGate& gate) {
  kernels::adam_step(weight.dtype(), grad.dtype(), half_out.defined() ? half_out.dtype() : weight.dtype(),
                     weight.raw_data(), grad.raw_data(), exp_avg.raw_data(), exp_avg_sq.raw_data(), ptr(max_exp_avg_sq),
                     ptr(half_out), weight.numel(), args, static_cast<const float*>(ptr(gate.found_inf)),
                     static_cast<int32_t*>(ptr(gate.skipped_steps)), context(weight).stream);
}

void sgd_step(const Tensor& weight, const Tensor& grad, const Tensor& momentum_buffer,
                           const Tensor& half_out, const SgdArgs& args, const StepGate& gate) {
  kernels::sgd_step(weight.dtype(), grad.dtype(), half_out.defined() ? half_out.dtype() : weight.dtype(),
                    weight.raw_data(), grad.raw_data(), ptr(momentum_buffer), ptr(half_out), weight.numel(), args,
                    static_cast<const float*>(ptr(gate.found_inf)), static_cast<int32_t*>(ptr(gate.skipped_steps)),
                    context(weight).stream);
}

void register_optim() {
  backends::adam_step.set(DeviceType::CUDA, adam_step);
  backends::sgd_step.set(DeviceType::CUDA, sgd_step);
}

}  // namespace mixtrain::backends::cuda
