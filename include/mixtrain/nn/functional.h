#pragma once
// mixtrain::nn::functional, PyTorch's torch.nn.functional: the ops themselves are declared in the
// ops layer (mixtrain/ops/nn_functional.h) so that src/ops can implement them without including
// the nn layer; this is the name users include.
#include "mixtrain/ops/nn_functional.h"
