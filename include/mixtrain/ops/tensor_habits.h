#pragma once
// What libtorch users type without thinking: index_select, var/std, the device constants, and
// PyTorch's printing of values (Tensor::str(), operator<<) with its print options.
#include <cstdint>

#include "mixtrain/core/tensor.h"

namespace mixtrain {

constexpr DeviceType kCPU = DeviceType::CPU;
constexpr DeviceType kCUDA = DeviceType::CUDA;

// x's slices `index` (int64, 0-d or 1-D) along dim, in index order; repeats allowed. Floating
// tensors are differentiable (the gradient adds up over repeated indices). An index outside
// [0, x.size(dim)) is an Error (checked where the index is on the CPU).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);

// Variance over dims (all when empty), dividing by n - 1 when unbiased (libtorch's default)
// else by n; half inputs are computed in fp32 and the result cast back.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, bool unbiased = true, bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, bool unbiased = true, bool keepdim = false);

// PyTorch's torch.set_printoptions: digits after the point, the element count above which a
// tensor is summarised, the items kept at each end of a summarised dimension, and the line width.
struct PrintOptions {
  int precision = 4;
  int64_t threshold = 1000;
  int64_t edgeitems = 3;
  int64_t linewidth = 80;
};
// Process-wide; set it before printing from several threads.
void set_printoptions(const PrintOptions& options);
PrintOptions printoptions();

}  // namespace mixtrain
