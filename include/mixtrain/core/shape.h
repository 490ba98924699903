#pragma once
// Shapes and strides (in elements) and the helpers every op uses on them.
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace mixtrain {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"

// PyTorch's broadcasting: align from the right; sizes must match or be 1. Throws naming op.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Wraps a possibly negative dim into [0, ndim). Throws naming op when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace mixtrain
