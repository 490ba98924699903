#pragma once
// How nn::Linear reaches amp's FP8 autocast (amp/fp8.h) without including the layer above it:
// amp installs this hook once; a Linear with FP8 state calls it first in forward, and runs its
// plain path when it returns an undefined tensor (no FP8 scope applies). The same inversion as
// the ops layer's pre-dispatch hook (docs/ARCHITECTURE.md, "Layers").
#include "mixtrain/nn/linear.h"

namespace mixtrain::nn::detail {

using LinearFp8Hook = Tensor (*)(LinearImpl& layer, const Tensor& input);
void set_linear_fp8_hook(LinearFp8Hook hook);

}  // namespace mixtrain::nn::detail
