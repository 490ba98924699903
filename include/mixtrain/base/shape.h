#pragma once
// Shapes and strides (in elements) and the helpers every op uses on them.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace mixtrain {

using Shape = std::vector<int64_t>;

// How a 4-D [N, C, H, W] tensor lies in memory: row-major (Contiguous, NCHW) or ChannelsLast
// (NHWC: the channels of one pixel are adjacent), the layout tensor-core convolutions read.
enum class MemoryFormat { Contiguous, ChannelsLast };

// The element count of a shape; throws mixtrain::Error naming `op` and the shape for a negative
// size or a product past 2^63 - 1 (so no caller ever sees a wrapped count).
int64_t checked_numel(const Shape& shape, const char* op);
// checked_numel(shape) * element_size as a byte count; throws when it passes PTRDIFF_MAX.
size_t checked_nbytes(const Shape& shape, size_t element_size, const char* op);
// checked_numel(shape, "numel").
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
// NHWC strides of a 4-D shape (throws for another rank).
Shape channels_last_strides(const Shape& shape);
Shape strides_for(const Shape& shape, MemoryFormat format);
// Whether strides equal `expected`, ignoring size-1 dimensions (whose stride is never used).
bool strides_match(const Shape& shape, const Shape& strides, const Shape& expected);
// The dimensions ordered by stride, largest first (stable): the order in which an elementwise
// loop walks an output so that it moves through memory forwards in any dense layout, and
// operands sharing a permuted layout (channels-last) coalesce into one contiguous run.
std::vector<int> dims_in_memory_order(const Shape& shape, const Shape& strides);
std::string shape_str(const Shape& shape);  // "[2, 3]"

// PyTorch's broadcasting: align from the right; sizes must match or be 1. Throws naming op.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Wraps a possibly negative dim into [0, ndim). Throws naming op when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace mixtrain
