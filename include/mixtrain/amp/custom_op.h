#pragma once
// Custom ops under autocast (PyTorch's torch.amp.custom_fwd(cast_inputs=...) / custom_bwd).
// Autocast knows the built-in ops; a user's own op says how it wants to be treated:
//   CastInputs::Keep            run under the surrounding autocast state (ops inside are cast as
//                               usual); the backward runs under that same state
//   CastInputs::Float32         where autocast is on, cast floating inputs to fp32 and turn autocast
//                               off inside: the op computes in fp32 (e.g. it is unstable in fp16)
//   CastInputs::LowerPrecision  where autocast is on, cast floating inputs to the autocast dtype
//                               (fp16/bf16) and turn autocast off inside
// Where autocast is off, the inputs are left alone. Casts are differentiable, so gradients reach
// the original inputs in their own dtypes.
//
// Two forms:
//   auto safe_norm = amp::custom_fwd([](const Tensor& x) { return x / x.pow(2).sum(-1, true).sqrt(); },
//                                    amp::CastInputs::Float32);
//   Tensor y = safe_norm(x);           // a composite: autograd derives its backward
// and, for a hand-written backward (autograd::Function with custom_fwd/custom_bwd), see
// custom_function below. docs/AUTOCAST.md, "Custom ops".
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/autograd/node.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain::amp {

enum class CastInputs { Keep, Float32, LowerPrecision };

// The autocast state of the calling thread for both device types, to run code under it later.
struct AutocastState {
  std::array<bool, kNumDeviceTypes> enabled{};
  std::array<DType, kNumDeviceTypes> dtype{kFloat16, kFloat16, kFloat16};
  static AutocastState current();
};

// Makes `state` current for its lifetime (guards for both device types), and lets ops see the
// autocast hook even inside a backward pass, where the engine normally keeps it off.
class AutocastStateGuard {
 public:
  explicit AutocastStateGuard(const AutocastState& state);
  ~AutocastStateGuard();
  AutocastStateGuard(const AutocastStateGuard&) = delete;
  AutocastStateGuard& operator=(const AutocastStateGuard&) = delete;

 private:
  struct Impl;
  Impl* impl_;
};

// The input as a custom op with that policy receives it (unchanged for Keep, non-floating
// tensors, or where autocast is off for its device type).
Tensor cast_input(const Tensor& x, CastInputs cast);
// The state a custom op's body runs under: the current one for Keep, else autocast off.
AutocastState body_state(CastInputs cast);

namespace detail {
inline Tensor cast_arg(const Tensor& x, CastInputs c) { return cast_input(x, c); }
inline std::vector<Tensor> cast_arg(const std::vector<Tensor>& xs, CastInputs c) {
  std::vector<Tensor> out;
  for (const Tensor& x : xs) out.push_back(cast_input(x, c));
  return out;
}
template <class T, class = std::enable_if_t<!std::is_convertible_v<const T&, const Tensor&> &&
                                            !std::is_convertible_v<const T&, const std::vector<Tensor>&>>>
const T& cast_arg(const T& x, CastInputs) {
  return x;
}
}  // namespace detail

// Wraps `fn` (any arguments; Tensor and std::vector<Tensor> ones are cast) so that each call runs
// with its inputs cast and autocast set as `cast` says.
template <class F>
auto custom_fwd(F fn, CastInputs cast) {
  return [fn = std::move(fn), cast](const auto&... args) {
    const AutocastState state = body_state(cast);
    auto run = [&](const auto&... cast_args) {
      AutocastStateGuard guard(state);
      return fn(cast_args...);
    };
    return run(detail::cast_arg(args, cast)...);
  };
}

// A differentiable op with a hand-written backward. `forward` receives the (cast) inputs and
// returns the outputs together with the backward closure (one gradient per output in, one per
// input out; undefined where none), capturing what it needs. The forward runs without recording
// a graph (the backward is yours), under body_state(cast); the backward runs under that same
// state (PyTorch's custom_bwd), also when autocast is off by the time backward() is called.
struct CustomForwardResult {
  std::vector<Tensor> outputs;
  autograd::BackwardFn backward;
};
std::vector<Tensor> custom_function(const char* name, const std::vector<Tensor>& inputs, CastInputs cast,
                                    const std::function<CustomForwardResult(const std::vector<Tensor>&)>& forward);

}  // namespace mixtrain::amp
