#pragma once
// PyTorch's printing of tensor values (Tensor::str(), operator<<; printing.cpp) and its print
// options (torch.set_printoptions).
#include <cstdint>

namespace mixtrain {

// Digits after the point, the element count above which a tensor is summarised, the items kept
// at each end of a summarised dimension, and the line width.
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
