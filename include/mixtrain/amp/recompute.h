#pragma once
// Activation checkpointing by recomputation (torch.utils.checkpoint): run a region of the model
// without keeping its intermediate activations, and recompute them in backward. The function
// keeps PyTorch's name, nn::checkpoint; it lives in the amp layer because the recomputation
// replays the forward's autocast state (docs/ARCHITECTURE.md). Saved training state is another
// thing: io/checkpoint.h.
//
//   Tensor y = nn::checkpoint([&](const Tensor& x) { return block->forward(x); }, x);
//
// The forward runs fn under NoGradGuard, keeping only fn's inputs (as saved tensors: writing one
// in place before backward raises), the default generator's state and the autocast state. In
// backward, fn runs again with grad on under that autocast state and generator state (so dropout
// draws the same masks), and its recomputed outputs are backpropagated through by a nested
// backward: the parameters inside fn accumulate their gradients there, and the inputs' gradients
// go on to the outer graph. Gradients are bit-identical to running fn without checkpointing.
//
// Rules: fn must be a pure function of its inputs, the module state and the default generator
// (a second run must compute the same thing); its outputs must be floating tensors. BatchNorm's
// running statistics and batch count are updated by the forward only (autograd::
// is_checkpoint_recompute). Under grad mode the outputs require grad even where nothing in fn
// does; with grad mode off, checkpoint just calls fn.
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixtrain/core/tensor.h"

namespace mixtrain::nn {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

// The general form: any number of inputs (undefined ones allowed) and outputs.
std::vector<Tensor> checkpoint(CheckpointFn fn, const std::vector<Tensor>& inputs);

namespace detail {
template <class F, size_t... I>
Tensor call_with(const F& fn, const std::vector<Tensor>& in, std::index_sequence<I...>) {
  return fn(in[I]...);
}
}  // namespace detail

// fn(inputs...) -> Tensor, for tensor inputs.
template <class F, class... Ts>
Tensor checkpoint(F fn, const Tensor& first, const Ts&... rest) {
  static_assert((std::is_convertible_v<const Ts&, const Tensor&> && ...), "checkpoint: inputs must be tensors");
  constexpr size_t n = 1 + sizeof...(Ts);
  CheckpointFn body = [fn = std::move(fn)](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{detail::call_with(fn, in, std::make_index_sequence<n>{})};
  };
  return checkpoint(std::move(body), std::vector<Tensor>{first, static_cast<const Tensor&>(rest)...}).at(0);
}

}  // namespace mixtrain::nn
