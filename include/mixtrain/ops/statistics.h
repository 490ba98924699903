#pragma once
// Spread of values: var and std (torch.var, torch.std).
#include <cstdint>
#include <vector>

#include "mixtrain/core/tensor.h"

namespace mixtrain {

// Variance over dims (all when empty), dividing by n - 1 when unbiased (libtorch's default)
// else by n; half inputs are computed in fp32 and the result cast back.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, bool unbiased = true, bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, bool unbiased = true, bool keepdim = false);

}  // namespace mixtrain
