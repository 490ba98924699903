// Copies on CUDA (within the device, across the host boundary, between devices) and fills.
#include <cstring>

#include "backends/copy.h"
#include "backends/cuda/context.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/operands.h"
#include "backends/cuda/pinned.h"
#include "kernels/cuda/copy.h"

namespace mixtrain::backends::cuda {

namespace {

// One memcpy does: the same dtype and the same dense layout (both NCHW-order or both channels-last).
bool plain_copy(const Tensor& src, const Tensor& dst) {
  return src.dtype() == dst.dtype() && src.same_dense_layout(dst);
}

// From pageable memory the call returns once the bytes are staged, so the source may go at once.
// From pinned memory it only queues the copy: the source is held until the stream ran it (the
// caller, Tensor::to, waits unless asked for non_blocking).
void upload(void* device_ptr, const Tensor& host, size_t bytes, DeviceContext& ctx) {
  MT_CUDA_CHECK(cudaMemcpyAsync(device_ptr, host.raw_data(), bytes, cudaMemcpyHostToDevice, ctx.stream));
  if (host.is_pinned()) hold_until_done(host.impl()->storage, ctx);
}

void host_to_device(const Tensor& src, const Tensor& dst) {
  DeviceContext& ctx = context(dst);
  if (plain_copy(src, dst)) return upload(dst.raw_data(), src, dst.nbytes(), ctx);
  // Upload as the source's dtype, contiguous; convert and scatter on the device.
  Tensor host = src.is_contiguous() ? src : Tensor::empty(src.shape(), TensorOptions(src.dtype()));
  if (!src.is_contiguous()) backends::copy(DeviceType::CPU, src, host);
  Tensor staged = Tensor::empty(src.shape(), TensorOptions(src.dtype()).device(dst.device()));
  upload(staged.raw_data(), host, host.nbytes(), ctx);
  backends::copy(DeviceType::CUDA, staged, dst);
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
  backends::copy(DeviceType::CPU, host, dst);
}

}  // namespace

void copy(const Tensor& src, const Tensor& dst) {
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

void fill(const Tensor& dst, double value) {
  kernels::fill(make_iter<1>("fill", {&dst}), dst.dtype(), value, context(dst).stream);
}

void register_copy() {
  backends::copy.set(DeviceType::CUDA, copy);
  backends::fill.set(DeviceType::CUDA, fill);
}

}  // namespace mixtrain::backends::cuda
