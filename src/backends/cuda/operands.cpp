// The CUDA backend's operand plumbing: elementwise iteration over merged dimensions, device
// checks, layout conversions.
#include "backends/cuda/operands.h"

#include <cstring>

#include "backends/copy.h"
#include "backends/cuda/context.h"
#include "backends/cuda/cuda_check.h"

namespace mixtrain::backends::cuda {

void check_device(const char* op, Device device, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    MT_CHECK(!t->defined() || t->device() == device, op, ": expected tensors on ", device, ", got ", t->str());
}

template <int N>
kernels::ElemIter<N> make_iter(const char* op, const std::array<const Tensor*, N>& operands) {
  const Tensor& out = *operands[0];
  MT_CHECK(out.device().is_cuda(), op, ": expected CUDA tensors, got ", out.summary());
  for (const Tensor* t : operands)
    MT_CHECK(t->device() == out.device() && t->shape() == out.shape(), op, ": operand ", t->str(),
             " does not match the output ", out.summary());
  kernels::ElemIter<N> it;
  it.numel = out.numel();
  const Shape& shape = out.shape();
  // Merge neighbouring dimensions that are contiguous with each other in every operand.
  int nd = 0;
  for (int d : dims_in_memory_order(shape, out.strides())) {
    if (shape[d] == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < N && merge; ++k) merge = it.strides[k][nd - 1] == operands[k]->stride(d) * shape[d];
    if (merge) {
      it.sizes[nd - 1] *= shape[d];
      for (int k = 0; k < N; ++k) it.strides[k][nd - 1] = operands[k]->stride(d);
      continue;
    }
    MT_CHECK(nd < kernels::kMaxDims, op, ": tensors of more than ", kernels::kMaxDims,
             " non-mergeable dimensions are not supported on CUDA, got ", out.summary());
    it.sizes[nd] = shape[d];
    for (int k = 0; k < N; ++k) it.strides[k][nd] = operands[k]->stride(d);
    ++nd;
  }
  if (nd == 0) {  // a single element
    it.sizes[0] = 1;
    nd = 1;
  }
  it.ndim = nd;
  it.contiguous = nd == 1;
  for (int k = 0; k < N; ++k) {
    const int64_t elem = static_cast<int64_t>(element_size(operands[k]->dtype()));
    it.data[k] = static_cast<char*>(operands[k]->raw_data());
    it.contiguous = it.contiguous && (it.strides[k][0] == 1 || it.sizes[0] == 1);
    for (int d = 0; d < nd; ++d) it.strides[k][d] *= elem;
  }
  return it;
}

template kernels::ElemIter<1> make_iter<1>(const char*, const std::array<const Tensor*, 1>&);
template kernels::ElemIter<2> make_iter<2>(const char*, const std::array<const Tensor*, 2>&);
template kernels::ElemIter<3> make_iter<3>(const char*, const std::array<const Tensor*, 3>&);
template kernels::ElemIter<4> make_iter<4>(const char*, const std::array<const Tensor*, 4>&);

Tensor as_layout(const Tensor& t, DType dt, MemoryFormat format) {
  if (!t.defined() || (t.dtype() == dt && t.is_contiguous(format))) return t;
  Tensor c = Tensor::empty(t.shape(), TensorOptions(dt).device(t.device()), format);
  backends::copy(DeviceType::CUDA, t, c);
  return c;
}

Tensor as_contiguous(const Tensor& t, DType dt) { return as_layout(t, dt, MemoryFormat::Contiguous); }

MemoryFormat layout_of(const char* op, const Tensor& out, const Tensor& activation) {
  const bool nchw = out.is_contiguous(), nhwc = out.is_contiguous(MemoryFormat::ChannelsLast);
  MT_CHECK(nchw || nhwc, op, ": the output ", out.summary(), " must be contiguous or channels-last");
  if (nchw && nhwc) return activation.suggest_memory_format();
  return nhwc ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}


}  // namespace mixtrain::backends::cuda
