#pragma once
// Selecting slices by an index tensor: index_select (torch.index_select).
#include <cstdint>

#include "mixtrain/core/tensor.h"

namespace mixtrain {

// x's slices `index` (int64, 0-d or 1-D) along dim, in index order; repeats allowed. Floating
// tensors are differentiable (the gradient adds up over repeated indices). An index outside
// [0, x.size(dim)) is an Error (checked where the index is on the CPU).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

}  // namespace mixtrain
