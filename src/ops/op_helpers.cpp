#include "ops/op_helpers.h"

#include <sstream>

#include "mixtrain/base/grad_mode.h"

namespace mixtrain::ops {

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  std::ostringstream os;
  os << shape_str(t.shape()) << ' ' << t.dtype() << ' ' << t.device();
  return os.str();
}

void check_defined(const char* op, const Tensor& t, const char* what) {
  MT_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

void check_floating(const char* op, const Tensor& t) {
  MT_CHECK(is_floating(t.dtype()), op, ": expected a floating tensor, got ", describe(t));
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  MT_CHECK(a.device() == b.device(), op, ": tensors are on different devices: ", describe(a), " and ", describe(b));
}

Tensor new_empty(const Shape& shape, const Tensor& like) { return Tensor::empty(shape, like.options()); }
Tensor new_empty(const Shape& shape, const Tensor& like, DType dtype) {
  return Tensor::empty(shape, TensorOptions().dtype(dtype).device(like.device()));
}

namespace {
// Channels are the innermost dimension in memory: a channels-last tensor, dense or not (a narrow
// of one, as cat's backward makes). PyTorch's elementwise outputs follow their inputs' stride
// order, so such an input gives a channels-last output.
bool channels_innermost(const Tensor& t) {
  if (t.dim() != 4 || t.size(1) == 1 || t.numel() == 0) return false;
  if (t.suggest_memory_format() == MemoryFormat::ChannelsLast) return true;
  if (t.is_contiguous()) return false;
  for (int64_t d : {0, 2, 3})
    if (t.size(d) > 1 && t.stride(d) <= t.stride(1)) return false;
  return t.size(2) > 1 || t.size(3) > 1;
}
}  // namespace

Tensor new_empty_preserving(const Shape& shape, const Tensor& like, DType dtype) {
  const MemoryFormat f = like.shape() == shape && channels_innermost(like) ? MemoryFormat::ChannelsLast
                                                                           : MemoryFormat::Contiguous;
  return Tensor::empty(shape, TensorOptions().dtype(dtype).device(like.device()), f);
}
Tensor new_empty_preserving(const Shape& shape, const Tensor& like) {
  return new_empty_preserving(shape, like, like.dtype());
}
Tensor new_empty_preserving(const Shape& shape, const Tensor& a, const Tensor& b, DType dtype) {
  const bool b_leads = b.shape() == shape && channels_innermost(b);
  return new_empty_preserving(shape, b_leads ? b : a, dtype);
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < g.dim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && g.size(d) != 1)) dims.push_back(d);
  }
  Tensor r = dims.empty() ? g : sum(g, dims, /*keepdim=*/true);
  return r.reshape(shape);
}

Tensor kernel_input(const Tensor& t, MemoryFormat format) {
  if (!t.defined()) return t;
  NoGradGuard no_grad;
  return t.detach().contiguous(t.dim() == 4 ? format : MemoryFormat::Contiguous);
}

Tensor gemm_ready(const Tensor& t) {
  const int64_t d = t.dim();
  const bool ok = t.stride(d - 1) == 1 || t.stride(d - 2) == 1 || t.size(d - 1) == 1 || t.size(d - 2) == 1;
  return ok ? t : t.contiguous();
}

void check_inplace(const char* op, const Tensor& self) {
  MT_CHECK(!(autograd::is_grad_enabled() && self.requires_grad()), op, ": in-place update of ", describe(self),
           ", which requires grad, while grad mode is on; run it under NoGradGuard or use the out-of-place op");
}

}  // namespace mixtrain::ops
