// The optimizers' fused updates: operand checks, then the backend of the weight's device runs
// the update (Backend::adam_step / sgd_step).
#include "optim/fused_update.h"

#include "backends/backend.h"
#include "mixtrain/core/error.h"

namespace mixtrain::optim::detail {

namespace {

void check_operand(const char* op, const Tensor& t, const Tensor& weight, const char* what) {
  MT_CHECK(t.device() == weight.device(), op, ": ", what, " is on ", t.device(), " but the weight is on ",
           weight.device());
  MT_CHECK(t.shape() == weight.shape(), op, ": ", what, " has shape ", shape_str(t.shape()), " but the weight has ",
           shape_str(weight.shape()));
  MT_CHECK(t.is_contiguous(), op, ": ", what, " must be contiguous");
}

void check_scalar(const char* op, const Tensor& t, DType dtype, const Tensor& weight, const char* what) {
  MT_CHECK(t.dtype() == dtype && t.numel() == 1 && t.device() == weight.device(), op, ": ", what, " must be a ",
           dtype, " scalar on the weight's device (", weight.device(), "), got ", t.str());
}

void check_gate(const char* op, const StepGate& gate, const Tensor& weight) {
  if (gate.found_inf.defined()) {
    MT_CHECK(gate.skipped_steps.defined(), op, ": a step gated on found_inf needs a skip counter");
    check_scalar(op, gate.found_inf, kFloat32, weight, "found_inf");
  }
  if (gate.skipped_steps.defined()) check_scalar(op, gate.skipped_steps, kInt32, weight, "the skip counter");
}

}  // namespace

void fused_adam(const Tensor& weight, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const Tensor& max_exp_avg_sq, const Tensor& half_out, const AdamArgs& args, const StepGate& gate) {
  const char* op = args.decoupled ? "AdamW.step" : "Adam.step";
  check_operand(op, weight, weight, "the weight");
  check_operand(op, grad, weight, "the gradient");
  check_operand(op, exp_avg, weight, "exp_avg");
  check_operand(op, exp_avg_sq, weight, "exp_avg_sq");
  if (args.amsgrad) check_operand(op, max_exp_avg_sq, weight, "max_exp_avg_sq");
  if (half_out.defined()) check_operand(op, half_out, weight, "the half parameter");
  check_gate(op, gate, weight);
  backends::backend_for(weight).adam_step(weight, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, half_out, args, gate);
}

void fused_sgd(const Tensor& weight, const Tensor& grad, const Tensor& momentum_buffer, const Tensor& half_out,
               const SgdArgs& args, const StepGate& gate) {
  check_operand("SGD.step", weight, weight, "the weight");
  check_operand("SGD.step", grad, weight, "the gradient");
  if (args.momentum != 0.0) check_operand("SGD.step", momentum_buffer, weight, "momentum_buffer");
  if (half_out.defined()) check_operand("SGD.step", half_out, weight, "the half parameter");
  check_gate("SGD.step", gate, weight);
  backends::backend_for(weight).sgd_step(weight, grad, momentum_buffer, half_out, args, gate);
}

}  // namespace mixtrain::optim::detail
