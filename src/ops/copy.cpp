// Casts, device moves, copies and fills.
#include "backends/copy.h"
#include "mixtrain/memory/allocator.h"
#include "ops/op_helpers.h"

namespace mixtrain {

using namespace ops;

namespace {
// Copies src into dst (same shape); a cross-device copy runs on the non-CPU side's backend.
void copy_into(const Tensor& src, const Tensor& dst) {
  // Meta tensors have no values: copying into one is shape-only, copying out of one is an error.
  MT_CHECK(!src.device().is_meta() || dst.device().is_meta(), "copy: cannot copy ", describe(src), " to ",
           dst.device(), ": a tensor on the meta device has shape and dtype but no data to copy");
  if (dst.device().is_meta()) return;
  const DeviceType t = src.device().is_cpu() ? dst.device().type : src.device().type;
  backends::copy(t, src, dst);
}
}  // namespace

Tensor to(const Tensor& x_in, DType dtype) {
  Tensor x = x_in;
  OpScope scope(OpId::to, {&x});
  check_defined("to", x, "input");
  if (x.dtype() == dtype) return x;
  MT_CHECK(!x.requires_grad() || is_floating(dtype), "to: cannot cast ", describe(x),
           ", which requires grad, to the non-floating dtype ", dtype);
  Tensor out = new_empty_preserving(x.shape(), x, dtype);
  copy_into(x, out);
  const DType src = x.dtype();
  autograd::record("ToBackward0", out, {&x}, [src](const TensorList& g) { return TensorList{g[0].to(src)}; });
  return out;
}

namespace {
// A copy from pinned memory to CUDA is only queued (the backend keeps the source alive until it
// ran); unless the caller said non_blocking, wait for it as a blocking copy would.
Tensor to_device(const Tensor& x_in, Device device, bool non_blocking) {
  Tensor x = x_in;
  OpScope scope(OpId::to, {&x});
  check_defined("to", x, "input");
  if (x.device() == device) return x;
  const MemoryFormat format = x.suggest_memory_format();  // a channels-last tensor moves as one
  Tensor src = x.contiguous(format);
  Tensor out = Tensor::empty(x.shape(), TensorOptions().dtype(x.dtype()).device(device), format);
  copy_into(src, out);
  if (!non_blocking && src.is_pinned() && device.is_cuda()) mixtrain::cuda::synchronize(device.index);
  const Device from = x.device();
  autograd::record("ToBackward0", out, {&x}, [from](const TensorList& g) { return TensorList{g[0].to(from)}; });
  return out;
}
}  // namespace

Tensor to(const Tensor& x, Device device) { return to_device(x, device, false); }

namespace {
Tensor copy_as(const Tensor& x_in, MemoryFormat format) {
  Tensor x = x_in;
  OpScope scope(OpId::clone, {&x});
  check_defined("clone", x, "input");
  Tensor out = Tensor::empty(x.shape(), TensorOptions().dtype(x.dtype()).device(x.device()), format);
  copy_into(x, out);
  autograd::record("CloneBackward0", out, {&x}, [](const TensorList& g) { return TensorList{g[0]}; });
  return out;
}
}  // namespace

Tensor contiguous(const Tensor& x, MemoryFormat format) {
  check_defined("contiguous", x, "input");
  MT_CHECK(format == MemoryFormat::Contiguous || x.dim() == 4, "contiguous: channels-last needs a 4-D [N, C, H, W] ",
           "tensor, got ", describe(x));
  const bool in_format = format == MemoryFormat::ChannelsLast ? x.suggest_memory_format() == MemoryFormat::ChannelsLast
                                                              : x.is_contiguous();
  return in_format ? x : copy_as(x, format);
}

Tensor contiguous(const Tensor& x) { return contiguous(x, MemoryFormat::Contiguous); }

// Keeps a channels-last layout, as PyTorch's clone keeps a dense one.
Tensor clone(const Tensor& x) {
  check_defined("clone", x, "input");
  return copy_as(x, x.suggest_memory_format());
}

Tensor Tensor::to(DType dtype) const { return mixtrain::to(*this, dtype); }
Tensor Tensor::to(Device device, bool non_blocking, bool copy) const {
  Tensor out = to_device(*this, device, non_blocking);
  return copy && out.is_same(*this) ? clone() : out;
}
Tensor Tensor::to(Device device, DType dtype, bool non_blocking, bool copy) const {
  Tensor out;
  if (device.is_cpu()) {
    // Cast on the CPU side of a move: fewer bytes cross when narrowing, none wasted when widening.
    out = to_device(*this, device, non_blocking).to(dtype);
  } else if (non_blocking && is_pinned() && device.is_cuda()) {
    // A cast on the host would land in pageable memory and make the copy synchronous.
    out = to_device(*this, device, true).to(dtype);
  } else {
    out = to_device(mixtrain::to(*this, dtype), device, non_blocking);
  }
  return copy && out.is_same(*this) ? clone() : out;
}

Tensor Tensor::pin_memory() const {
  Tensor x = *this;
  OpScope scope(OpId::to, {&x});
  check_defined("pin_memory", x, "input");
  MT_CHECK(x.device().is_cpu(), "pin_memory: only CPU tensors can be pinned, got ", describe(x));
  if (x.is_pinned()) return x;
  const std::string why = memory::pinned_memory_unavailable_reason();
  MT_CHECK(why.empty(), "pin_memory: cannot pin ", describe(x), ": ", why);
  const MemoryFormat format = x.suggest_memory_format();
  Tensor out = Tensor::empty(x.shape(), TensorOptions().dtype(x.dtype()).pinned_memory(true), format);
  copy_into(x.contiguous(format), out);
  autograd::record("PinMemoryBackward0", out, {&x}, [](const TensorList& g) { return TensorList{g[0]}; });
  return out;
}
Tensor Tensor::contiguous() const { return mixtrain::contiguous(*this); }
Tensor Tensor::contiguous(MemoryFormat format) const { return mixtrain::contiguous(*this, format); }
Tensor Tensor::clone() const { return mixtrain::clone(*this); }

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace("copy_", *this);
  check_defined("copy_", src, "source");
  Tensor s = src;
  if (s.shape() != shape()) s = s.expand(shape());
  if (s.device() != device()) s = s.to(device());
  copy_into(s, *this);
  bump_version();
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_inplace("fill_", *this);
  backends::fill(*this, *this, value);
  bump_version();
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0.0); }

}  // namespace mixtrain
