// Custom ops under autocast: input casts, the body's autocast state, and a backward that runs
// under the forward's state.
#include "mixtrain/amp/custom_op.h"

#include <optional>

#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/ops/dispatch.h"

namespace mixtrain::amp {

AutocastState AutocastState::current() {
  AutocastState s;
  for (DeviceType t : {DeviceType::CPU, DeviceType::CUDA}) {
    const auto i = static_cast<size_t>(t);
    s.enabled[i] = is_autocast_enabled(t);
    s.dtype[i] = autocast_dtype(t);
  }
  return s;
}

struct AutocastStateGuard::Impl {
  std::optional<AutocastGuard> cpu, cuda;
  ops::HookResumeGuard resume;
};

AutocastStateGuard::AutocastStateGuard(const AutocastState& s) : impl_(new Impl) {
  const bool cache = is_autocast_cache_enabled();
  impl_->cpu.emplace(DeviceType::CPU, s.dtype[static_cast<size_t>(DeviceType::CPU)],
                     s.enabled[static_cast<size_t>(DeviceType::CPU)], cache);
  impl_->cuda.emplace(DeviceType::CUDA, s.dtype[static_cast<size_t>(DeviceType::CUDA)],
                      s.enabled[static_cast<size_t>(DeviceType::CUDA)], cache);
}

AutocastStateGuard::~AutocastStateGuard() {
  // Guards end in the reverse order of their start.
  impl_->cuda.reset();
  impl_->cpu.reset();
  delete impl_;
}

Tensor cast_input(const Tensor& x, CastInputs cast) {
  if (cast == CastInputs::Keep || !x.defined() || !is_floating(x.dtype()) || !is_autocast_enabled(x.device().type))
    return x;
  const DType to = cast == CastInputs::Float32 ? kFloat32 : autocast_dtype(x.device().type);
  return x.dtype() == to ? x : x.to(to);
}

AutocastState body_state(CastInputs cast) {
  AutocastState s = AutocastState::current();
  if (cast != CastInputs::Keep) s.enabled.fill(false);
  return s;
}

std::vector<Tensor> custom_function(const char* name, const std::vector<Tensor>& inputs, CastInputs cast,
                                    const std::function<CustomForwardResult(const std::vector<Tensor>&)>& forward) {
  MT_CHECK(static_cast<bool>(forward), "custom_function ", name, ": no forward function");
  std::vector<Tensor> cast_inputs;
  for (const Tensor& x : inputs) cast_inputs.push_back(cast_input(x, cast));
  const AutocastState state = body_state(cast);
  CustomForwardResult r;
  {
    NoGradGuard no_grad;  // the user's backward replaces whatever graph the body would record
    AutocastStateGuard guard(state);
    std::vector<Tensor> detached;
    for (const Tensor& x : cast_inputs) detached.push_back(x.defined() ? x.detach() : x);
    r = forward(detached);
  }
  MT_CHECK(!r.outputs.empty(), "custom_function ", name, ": the forward returned no outputs");
  if (!autograd::needs_grad(cast_inputs)) return r.outputs;
  MT_CHECK(static_cast<bool>(r.backward), "custom_function ", name,
           ": inputs require grad but the forward returned no backward function");
  std::vector<Tensor*> outs;
  for (Tensor& t : r.outputs) outs.push_back(&t);
  std::vector<const Tensor*> ins;
  for (const Tensor& t : cast_inputs) ins.push_back(&t);
  const size_t n_inputs = cast_inputs.size();
  autograd::record(name, outs, ins, [state, n_inputs, name, fn = r.backward](const autograd::TensorList& grads) {
    AutocastStateGuard guard(state);
    autograd::TensorList g = fn(grads);
    MT_CHECK(g.size() == n_inputs, "custom_function ", name, ": the backward returned ", g.size(),
             " gradients for ", n_inputs, " inputs");
    return g;
  });
  return r.outputs;
}

}  // namespace mixtrain::amp
