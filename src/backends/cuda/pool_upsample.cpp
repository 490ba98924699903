// Host side of max_pool2d and upsampling on CUDA.
#include <vector>

#include "backends/pool_upsample.h"
#include "backends/cuda/context.h"
#include "backends/cuda/operands.h"
#include "backends/cuda/cuda_check.h"
#include "kernels/cuda/pool_upsample.h"

namespace mixtrain::backends::cuda {

namespace {

kernels::Planes planes_of(const Tensor& in, const Tensor& out, MemoryFormat layout = MemoryFormat::Contiguous) {
  return {in.size(0) * in.size(1), in.size(2), in.size(3), out.size(2), out.size(3),
          layout == MemoryFormat::ChannelsLast ? in.size(1) : 0};
}

// The fp32 accumulation buffer a half gradient's scatter-add needs (none for fp32/fp64).
Tensor accumulator(const Tensor& grad) {
  return is_half(grad.dtype()) ? scratch(sizeof(float) * static_cast<size_t>(grad.numel()), grad.device()) : Tensor();
}

}  // namespace

// In the output's layout (layout_of); indices share it.
void max_pool2d(const Tensor& x_in, const Pool2dParams& p, const Tensor& out, const Tensor& indices) {
  check_device("max_pool2d", out.device(), {&x_in, &indices});
  const MemoryFormat f = layout_of("max_pool2d", out, x_in);
  MT_CHECK(indices.is_contiguous(f), "max_pool2d: indices ", indices.summary(), " must share the output's layout");
  const Tensor x = as_layout(x_in, out.dtype(), f);
  kernels::max_pool2d(x.dtype(), x.raw_data(), planes_of(x, out, f), p, out.raw_data(), indices.data_ptr<int64_t>(),
                      context(out).stream);
}

void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_x) {
  check_device("max_pool2d_backward", grad_x.device(), {&grad_out, &indices});
  const MemoryFormat f = layout_of("max_pool2d_backward", grad_x, grad_out);
  const Tensor g = as_layout(grad_out, grad_x.dtype(), f), idx = as_layout(indices, kInt64, f);
  const Tensor acc = accumulator(grad_x);
  kernels::max_pool2d_backward(grad_x.dtype(), g.raw_data(), idx.data_ptr<int64_t>(), planes_of(grad_x, g, f),
                               grad_x.raw_data(), ptr(acc), context(grad_x).stream);
}

void upsample2d(const Tensor& x_in, const Upsample2dParams& p, const Tensor& out) {
  check_device("upsample2d", out.device(), {&x_in});
  const Tensor x = as_contiguous(x_in, out.dtype());
  kernels::upsample2d(x.dtype(), x.raw_data(), planes_of(x, out), p, out.raw_data(), context(out).stream);
}

void upsample2d_backward(const Tensor& grad_out, const Upsample2dParams& p, const Tensor& grad_x) {
  check_device("upsample2d_backward", grad_x.device(), {&grad_out});
  const Tensor g = as_contiguous(grad_out, grad_x.dtype());
  const Tensor acc = accumulator(grad_x);
  kernels::upsample2d_backward(grad_x.dtype(), g.raw_data(), planes_of(grad_x, g), p, grad_x.raw_data(), ptr(acc),
                               context(grad_x).stream);
}

void register_pool_upsample() {
  backends::max_pool2d.set(DeviceType::CUDA, max_pool2d);
  backends::max_pool2d_backward.set(DeviceType::CUDA, max_pool2d_backward);
  backends::upsample2d.set(DeviceType::CUDA, upsample2d);
  backends::upsample2d_backward.set(DeviceType::CUDA, upsample2d_backward);
}

}  // namespace mixtrain::backends::cuda
