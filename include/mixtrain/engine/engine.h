#pragma once
// The autograd engine (src/engine/engine.cpp): runs the graph's nodes (autograd/node.h) from the
// roots in reverse order of recording, each once every gradient flowing into it is summed, and
// frees each node's saved tensors once it has run. It sits above the ops layer: accumulating a
// gradient is an op. Tensor::backward() calls it.
#include "mixtrain/autograd/node.h"

namespace mixtrain::autograd {

// Runs backward from roots; grads must match roots' shapes (undefined: ones for scalars).
// Reentrant: a node's backward may run a nested backward (nn::checkpoint's recomputation).
void run_backward(const TensorList& roots, const TensorList& grads);

}  // namespace mixtrain::autograd
