// The optimizers' fused updates: operand checks, then the backend of the weight's device runs
// the update (backends::adam_step / sgd_step).
#include "optim/fused_update.h"

#include "backends/optim.h"
#include "mixtrain/base/error.h"

namespace mixtrain::optim::detail {

namespace {

// The kernels walk every operand as a flat array beside the weight, so each must be dense in the
// weight's layout (contiguous, or channels-last for a channels-last weight).
void check_operand(const char* op, const Tensor& t, const Tensor& weight, const char* what) {
  MT_CHECK(t.device() == weight.device(), op, ": ", what, " is on ", t.device(), " but the weight is on ",
           weight.device());
  MT_CHECK(t.shape() == weight.shape(), op, ": ", what, " has shape ", shape_str(t.shape()), " but the weight has ",
           shape_str(weight.shape()));
  MT_CHECK(weight.is_dense(), op, ": the weight ", weight.summary(), " must be contiguous or channels-last");
  MT_CHECK(t.same_dense_layout(weight), op, ": ", what, " ", t.summary(), " is not laid out as the weight ",
           weight.summary(), " (strides ", shape_str(t.strides()), " and ", shape_str(weight.strides()),
           "); change a model's layout (Module::to(MemoryFormat)) before its optimizer takes a step");
}

// The gradient is only read: one in another layout (a user-set one) is copied into the weight's.
Tensor grad_in_weight_layout(const Tensor& grad, const Tensor& weight) {
  if (!grad.defined() || grad.same_dense_layout(weight) || grad.shape() != weight.shape()) return grad;
  return grad.contiguous(weight.suggest_memory_format());
}

void check_scalar(const char* op, const Tensor& t, DType dtype, const Tensor& weight, const char* what) {
  MT_CHECK(t.dtype() == dtype && t.numel() == 1 && t.device() == weight.device(), op, ": ", what, " must be a ",
           dtype, " scalar on the weight's device (", weight.device(), "), got ", t.summary());
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
  const Tensor g = grad_in_weight_layout(grad, weight);
  check_operand(op, weight, weight, "the weight");
  check_operand(op, g, weight, "the gradient");
  check_operand(op, exp_avg, weight, "exp_avg");
  check_operand(op, exp_avg_sq, weight, "exp_avg_sq");
  if (args.amsgrad) check_operand(op, max_exp_avg_sq, weight, "max_exp_avg_sq");
  if (half_out.defined()) check_operand(op, half_out, weight, "the half parameter");
  check_gate(op, gate, weight);
  backends::adam_step(weight, weight, g, exp_avg, exp_avg_sq, max_exp_avg_sq, half_out, args, gate);
}

void fused_sgd(const Tensor& weight, const Tensor& grad, const Tensor& momentum_buffer, const Tensor& half_out,
               const SgdArgs& args, const StepGate& gate) {
  const Tensor g = grad_in_weight_layout(grad, weight);
  check_operand("SGD.step", weight, weight, "the weight");
  check_operand("SGD.step", g, weight, "the gradient");
  if (args.momentum != 0.0) check_operand("SGD.step", momentum_buffer, weight, "momentum_buffer");
  if (half_out.defined()) check_operand("SGD.step", half_out, weight, "the half parameter");
  check_gate("SGD.step", gate, weight);
  backends::sgd_step(weight, weight, g, momentum_buffer, half_out, args, gate);
}

}  // namespace mixtrain::optim::detail
