#include "mixtrain/core/shape.h"

#include <algorithm>
#include <sstream>

#include "mixtrain/core/error.h"

namespace mixtrain {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i] > 0 ? shape[i] : 1;
  }
  return strides;
}

Shape channels_last_strides(const Shape& shape) {
  MT_CHECK(shape.size() == 4, "channels_last: expected a 4-D [N, C, H, W] shape, got ", shape_str(shape));
  auto at_least_1 = [](int64_t v) { return v > 0 ? v : 1; };
  const int64_t c = at_least_1(shape[1]), w = at_least_1(shape[3]), h = at_least_1(shape[2]);
  return {h * w * c, 1, w * c, c};
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
