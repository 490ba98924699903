// The CUDA backend's entry point, its operand plumbing, and the elementwise family: copies
// (within the device and across the host boundary), fills, random fills, unary, binary,
// comparison and where.
#include "backends/cuda/cuda_backend.h"

#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/context.h"
#include "backends/cuda/cuda_check.h"

namespace mixtrain::backends::cuda {

Backend* cuda_backend() {
  if (!mixtrain::cuda::is_available()) return nullptr;
  static CudaBackend backend;
  return &backend;
}

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
  cuda_backend()->copy(t, c);
  return c;
}

Tensor as_contiguous(const Tensor& t, DType dt) { return as_layout(t, dt, MemoryFormat::Contiguous); }

MemoryFormat layout_of(const char* op, const Tensor& out, const Tensor& activation) {
  const bool nchw = out.is_contiguous(), nhwc = out.is_contiguous(MemoryFormat::ChannelsLast);
  MT_CHECK(nchw || nhwc, op, ": the output ", out.summary(), " must be contiguous or channels-last");
  if (nchw && nhwc) return activation.suggest_memory_format();
  return nhwc ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}


// ---- copies

namespace {

// One memcpy does: the same dtype and the same dense layout (both NCHW-order or both channels-last).
bool plain_copy(const Tensor& src, const Tensor& dst) {
  return src.dtype() == dst.dtype() && src.same_dense_layout(dst);
}

void host_to_device(const Tensor& src, const Tensor& dst) {
  DeviceContext& ctx = context(dst);
  if (plain_copy(src, dst)) {
    // From pageable memory the call returns once the bytes are staged, so src may go at once.
    MT_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyHostToDevice, ctx.stream));
    return;
  }
  // Upload as the source's dtype, contiguous; convert and scatter on the device.
  Tensor host = src.is_contiguous() ? src : Tensor::empty(src.shape(), TensorOptions(src.dtype()));
  if (!src.is_contiguous()) cpu::cpu_backend().copy(src, host);
  Tensor staged = Tensor::empty(src.shape(), TensorOptions(src.dtype()).device(dst.device()));
  MT_CUDA_CHECK(cudaMemcpyAsync(staged.raw_data(), host.raw_data(), host.nbytes(), cudaMemcpyHostToDevice, ctx.stream));
  cuda_backend()->copy(staged, dst);
}

void device_to_host(const Tensor& src, const Tensor& dst) {
  DeviceContext& ctx = context(src);
  if (plain_copy(src, dst)) {
    read_back(src.raw_data(), dst.raw_data(), dst.nbytes(), ctx);
    return;
  }
  const Tensor packed = as_contiguous(src, src.dtype());
  Tensor host = Tensor::empty(src.shape(), TensorOptions(src.dtype()));
  read_back(packed.raw_data(), host.raw_data(), host.nbytes(), ctx);
  cpu::cpu_backend().copy(host, dst);
}

}  // namespace

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  MT_CHECK(src.shape() == dst.shape(), "copy: shapes ", shape_str(src.shape()), " and ", shape_str(dst.shape()),
           " differ");
  if (src.numel() == 0) return;
  if (src.device().is_cpu()) return host_to_device(src, dst);
  if (dst.device().is_cpu()) return device_to_host(src, dst);
  if (src.device() != dst.device()) {
    // Between two GPUs: through the host, simple and rare.
    Tensor host = Tensor::empty(src.shape(), TensorOptions(src.dtype()));
    device_to_host(src, host);
    host_to_device(host, dst);
    return;
  }
  DeviceContext& ctx = context(dst);
  if (plain_copy(src, dst)) {
    MT_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDeviceToDevice, ctx.stream));
    return;
  }
  kernels::copy(make_iter<2>("copy", {&dst, &src}), dst.dtype(), src.dtype(), ctx.stream);
}

void CudaBackend::fill(const Tensor& dst, double value) {
  kernels::fill(make_iter<1>("fill", {&dst}), dst.dtype(), value, context(dst).stream);
}

void CudaBackend::random(const Tensor& dst, RandomKind kind, uint64_t seed, uint64_t offset) {
  MT_CHECK(dst.is_contiguous(), "random: expected a contiguous output, got ", dst.summary());
  kernels::random(dst.dtype(), dst.raw_data(), dst.numel(), kind, seed, offset, context(dst).stream);
}

void CudaBackend::dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out) {
  check_device("dropout", out.device(), {&x});
  MT_CHECK(x.is_contiguous() && out.is_contiguous() && x.dtype() == out.dtype() && x.shape() == out.shape(),
           "dropout: expected contiguous input and output of one dtype and shape, got ", x.summary(), " and ", out.summary());
  kernels::dropout(x.dtype(), x.raw_data(), out.raw_data(), x.numel(), p, seed, offset, context(out).stream);
}

// ---- elementwise

void CudaBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) {
  kernels::unary(op, x.dtype(), make_iter<2>(unary_op_name(op), {&out, &x}), alpha, context(out).stream);
}

void CudaBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& grad_y,
                                 const Tensor& grad_x, double alpha) {
  // x or y may be undefined when the formula does not read it; grad_y stands in (same shape).
  const Tensor& xs = x.defined() ? x : grad_y;
  const Tensor& ys = y.defined() ? y : grad_y;
  kernels::unary_backward(op, grad_y.dtype(), make_iter<4>(unary_op_name(op), {&grad_x, &xs, &ys, &grad_y}), alpha,
                          context(grad_x).stream);
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  kernels::binary(op, out.dtype(), make_iter<3>(binary_op_name(op), {&out, &a, &b}), context(out).stream);
}

void CudaBackend::binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out) {
  kernels::binary_scalar(op, out.dtype(), make_iter<2>(binary_op_name(op), {&out, &a}), s, scalar_first,
                         context(out).stream);
}

void CudaBackend::compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  kernels::compare(op, a.dtype(), make_iter<3>("compare", {&out, &a, &b}), context(out).stream);
}

void CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  kernels::where(out.dtype(), make_iter<4>("where", {&out, &cond, &a, &b}), context(out).stream);
}

}  // namespace mixtrain::backends::cuda
