#include "mixtrain/base/shape.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <sstream>

#include "mixtrain/base/error.h"

namespace mixtrain {

int64_t checked_numel(const Shape& shape, const char* op) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : shape) {
    MT_CHECK(s >= 0, op, ": negative size ", s, " in shape ", shape_str(shape));
    // Keep multiplying after an overflow only to find a later 0 (which makes the product 0)
    // or a negative size (reported first).
    if (!overflow && __builtin_mul_overflow(n, s, &n)) overflow = true;
  }
  for (int64_t s : shape)
    if (s == 0) return 0;
  MT_CHECK(!overflow, op, ": shape ", shape_str(shape), " has more than 2^63 - 1 elements");
  return n;
}

size_t checked_nbytes(const Shape& shape, size_t element_size, const char* op) {
  const int64_t n = checked_numel(shape, op);
  // PTRDIFF_MAX bounds every object size (pointer differences must not overflow).
  MT_CHECK(element_size == 0 || static_cast<uint64_t>(n) <= static_cast<uint64_t>(PTRDIFF_MAX) / element_size, op,
           ": shape ", shape_str(shape), " with ", element_size, "-byte elements needs more than 2^63 - 1 bytes");
  return static_cast<size_t>(n) * element_size;
}

int64_t shape_numel(const Shape& shape) { return checked_numel(shape, "numel"); }

namespace {
// a * b for a stride; an empty tensor's other sizes can be large enough to overflow it.
int64_t stride_product(int64_t a, int64_t b, const Shape& shape) {
  int64_t out;
  MT_CHECK(!__builtin_mul_overflow(a, b, &out), "strides: shape ", shape_str(shape),
           " has strides past 2^63 - 1 elements");
  return out;
}
}  // namespace

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    if (i > 0) s = stride_product(s, shape[i] > 0 ? shape[i] : 1, shape);
  }
  return strides;
}

Shape channels_last_strides(const Shape& shape) {
  MT_CHECK(shape.size() == 4, "channels_last: expected a 4-D [N, C, H, W] shape, got ", shape_str(shape));
  auto at_least_1 = [](int64_t v) { return v > 0 ? v : 1; };
  const int64_t c = at_least_1(shape[1]), w = at_least_1(shape[3]), h = at_least_1(shape[2]);
  const int64_t wc = stride_product(w, c, shape);
  return {stride_product(h, wc, shape), 1, wc, c};
}

Shape strides_for(const Shape& shape, MemoryFormat format) {
  return format == MemoryFormat::ChannelsLast ? channels_last_strides(shape) : contiguous_strides(shape);
}

bool strides_match(const Shape& shape, const Shape& strides, const Shape& expected) {
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1 && strides[i] != expected[i]) return false;
  return true;
}

std::vector<int> dims_in_memory_order(const Shape& shape, const Shape& strides) {
  std::vector<int> order(shape.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return strides[a] > strides[b]; });
  return order;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MT_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  MT_CHECK(dim >= lo && dim <= hi, op, ": dimension ", dim, " is out of range for a tensor of ", ndim,
           " dimensions (expected ", lo, " to ", hi, ")");
  return dim < 0 ? dim + (ndim == 0 ? 1 : ndim) : dim;
}

}  // namespace mixtrain
