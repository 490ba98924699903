// fp8_linear (ops/fp8.h): the FP8 layer's forward and backward, TransformerEngine's and torchao's
// scheme. Forward: input and weight cast to the forward format with their slots' scales, one
// scaled_mm. Backward: the output's gradient cast to the backward format, then the input and
// weight gradients as scaled_mm over the saved fp8 copies (HYBRID: e5m2 x e4m3), the bias gradient
// as a plain sum. Each cast records its amax and saturation count in the layer's state.
#include "backends/copy.h"
#include "backends/fp8.h"
#include "mixtrain/base/float8.h"
#include "mixtrain/memory/trace.h"
#include "mixtrain/ops/fp8.h"
#include "ops/op_helpers.h"

namespace mixtrain {

using namespace ops;

namespace {

constexpr int kInput = 0, kWeight = 1, kGradOutput = 2;

Tensor slot(const Tensor& t, int i) { return t.narrow(0, i, 1); }

float fp8_max(DType dtype) { return dtype == kFloat8E4M3FN ? kFloat8E4M3Max : kFloat8E5M2Max; }

// x (contiguous, no history) cast for slot i, with the scale_inv its product must use. Delayed
// scaling reads the slot's scale, which changes only at the recipe's update (after the step), so
// the slot's scale_inv serves the backward too; current scaling makes a scale from x's own amax
// (one more read of x) and keeps it with the data, since another call may rewrite the slot first.
Float8Tensor cast_slot(const Tensor& x, int i, DType dtype, const Fp8LinearState& s, const Fp8LinearConfig& c) {
  Float8Tensor q;
  if (c.current_scaling) {
    const TensorOptions f32 = TensorOptions(kFloat32).device(x.device());
    const Tensor amax = zeros({1, 1}, f32), scale = ones({1}, f32), scale_inv = empty({1}, f32);
    backends::cast_to_fp8(x, x, Tensor(), dtype, Tensor(), true, amax, Tensor());  // the amax alone
    backends::Fp8ScaleArgs args;
    args.fp8_max[0] = fp8_max(dtype);
    args.margin = c.margin;
    args.max_over_history = false;
    args.keep_scale_on_zero = false;
    args.roll = false;
    backends::fp8_update_scale(x, amax, scale, scale_inv, args);
    q.data = to_float8(x, dtype, scale, true, slot(s.amax, i), slot(s.saturated, i));
    // For the statistics: the slot shows the scale this cast used.
    backends::copy(x, scale, slot(s.scale, i));
    backends::copy(x, scale_inv, slot(s.scale_inv, i));
    q.scale_inv = scale_inv;
  } else {
    q.data = to_float8(x, dtype, slot(s.scale, i), true, slot(s.amax, i), slot(s.saturated, i));
    q.scale_inv = slot(s.scale_inv, i);
  }
  memory::tag_role(q.data.impl()->storage.get(), q.data.device(), memory::Role::Fp8Copy);
  return q;
}

void check_state(const Tensor& weight, const Fp8LinearState& s, const Fp8LinearConfig& c) {
  const char* op = "fp8_linear";
  for (const Tensor* t : {&s.scale, &s.scale_inv, &s.amax})
    MT_CHECK(t->defined() && t->dim() == 1 && t->size(0) == 3 && t->dtype() == kFloat32 && t->device() == weight.device(),
             op, ": the scaling state's scale, scale_inv and amax must be fp32 [3] on ", weight.device(), ", got ",
             describe(*t));
  MT_CHECK(s.saturated.defined() && s.saturated.dim() == 1 && s.saturated.size(0) == 3 && s.saturated.dtype() == kInt64 &&
               s.saturated.device() == weight.device(),
           op, ": the scaling state's saturated must be int64 [3] on ", weight.device(), ", got ", describe(s.saturated));
  MT_CHECK(is_float8(c.forward_dtype) && is_float8(c.backward_dtype) &&
               !(c.forward_dtype == kFloat8E5M2 && c.backward_dtype == kFloat8E5M2),
           op, ": formats ", c.forward_dtype, " (forward) and ", c.backward_dtype,
           " (backward) must be fp8, and not both float8_e5m2");
  MT_CHECK(c.margin >= 0 && c.margin <= 64, op, ": margin must be in [0, 64], got ", c.margin);
  if (s.weight.data.defined())
    MT_CHECK(s.weight.data.dtype() == c.forward_dtype && s.weight.data.shape() == weight.shape() &&
                 s.weight.scale_inv.defined(),
             op, ": the cached fp8 weight ", describe(s.weight.data), " does not match the weight ", describe(weight));
}

}  // namespace

Float8Tensor fp8_cast_weight(const Tensor& weight, const Fp8LinearState& state, const Fp8LinearConfig& config) {
  check_defined("fp8_linear", weight, "weight");
  check_state(weight, state, config);
  NoGradGuard no_grad;
  return cast_slot(weight.detach().contiguous(), kWeight, config.forward_dtype, state, config);
}

Tensor fp8_linear(const Tensor& input, const Tensor& weight, const Tensor& bias, const Fp8LinearState& state,
                  const Fp8LinearConfig& config) {
  const char* op = "fp8_linear";
  check_defined(op, input, "input");
  check_defined(op, weight, "weight");
  check_same_device(op, input, weight);
  MT_CHECK(weight.dim() == 2 && input.dim() >= 1 && input.size(-1) == weight.size(1), op, ": input ", describe(input),
           " does not match weight ", describe(weight));
  for (const Tensor* t : {&input, &weight})
    MT_CHECK(t->dtype() == kFloat32 || t->dtype() == kBFloat16 || t->dtype() == kFloat16, op,
             ": expected fp32, bf16 or fp16 input and weight, got ", describe(*t));
  check_state(weight, state, config);
  const DType bias_dtype = config.out_dtype == kFloat32 ? kBFloat16 : config.out_dtype;
  if (bias.defined())
    MT_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0) && bias.dtype() == bias_dtype &&
                 bias.device() == weight.device(),
             op, ": bias ", describe(bias), " must be [", weight.size(0), "] ", bias_dtype, " for a ", config.out_dtype,
             " output");
  HookExcludeGuard no_autocast;  // the casts are this op's own
  const int64_t in = weight.size(1);
  const Tensor x2 = input.reshape({-1, in});
  Shape out_shape = input.shape();
  out_shape.back() = weight.size(0);
  Float8Tensor qx, qw;
  Tensor out;
  {
    NoGradGuard no_grad;
    qx = cast_slot(x2.detach().contiguous(), kInput, config.forward_dtype, state, config);
    qw = state.weight.data.defined() ? state.weight : fp8_cast_weight(weight, state, config);
    out = scaled_mm(qx.data, qw.data.t(), qx.scale_inv, qw.scale_inv, config.out_dtype, bias);
  }
  if (autograd::needs_grad({&x2, &weight, &bias})) {
    const bool gx = x2.requires_grad(), gw = weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
    const DType x_dtype = x2.dtype(), w_dtype = weight.dtype(), b_dtype = bias_dtype;
    // qx and qw are this op's own copies (nothing else can write them): held as they are.
    autograd::record("Fp8LinearBackward", out, {&x2, &weight, &bias},
                     [qx, qw, state, config, gx, gw, gb, x_dtype, w_dtype, b_dtype](const TensorList& grads) {
                       HookExcludeGuard no_autocast;
                       const Tensor g = grads[0].detach().contiguous();
                       const Float8Tensor qg = cast_slot(g, kGradOutput, config.backward_dtype, state, config);
                       TensorList r(3);
                       if (gx) r[0] = scaled_mm(qg.data, qw.data, qg.scale_inv, qw.scale_inv, x_dtype);
                       if (gw) r[1] = scaled_mm(qg.data.t(), qx.data, qg.scale_inv, qx.scale_inv, w_dtype);
                       if (gb) r[2] = sum(g, {0}).to(b_dtype);
                       return r;
                     });
  }
  return out.reshape(out_shape);
}

}  // namespace mixtrain
