// Host side of max_pool2d, upsampling and embedding on CUDA.
#include <vector>

#include "backends/cuda/context.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"

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
void CudaBackend::max_pool2d(const Tensor& x_in, const Pool2dParams& p, const Tensor& out, const Tensor& indices) {
  check_device("max_pool2d", out.device(), {&x_in, &indices});
  const MemoryFormat f = layout_of("max_pool2d", out, x_in);
  MT_CHECK(indices.is_contiguous(f), "max_pool2d: indices ", indices.summary(), " must share the output's layout");
  const Tensor x = as_layout(x_in, out.dtype(), f);
  kernels::max_pool2d(x.dtype(), x.raw_data(), planes_of(x, out, f), p, out.raw_data(), indices.data_ptr<int64_t>(),
                      context(out).stream);
}

void CudaBackend::max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_x) {
  check_device("max_pool2d_backward", grad_x.device(), {&grad_out, &indices});
  const MemoryFormat f = layout_of("max_pool2d_backward", grad_x, grad_out);
  const Tensor g = as_layout(grad_out, grad_x.dtype(), f), idx = as_layout(indices, kInt64, f);
  const Tensor acc = accumulator(grad_x);
  kernels::max_pool2d_backward(grad_x.dtype(), g.raw_data(), idx.data_ptr<int64_t>(), planes_of(grad_x, g, f),
                               grad_x.raw_data(), ptr(acc), context(grad_x).stream);
}

void CudaBackend::upsample2d(const Tensor& x_in, const Upsample2dParams& p, const Tensor& out) {
  check_device("upsample2d", out.device(), {&x_in});
  const Tensor x = as_contiguous(x_in, out.dtype());
  kernels::upsample2d(x.dtype(), x.raw_data(), planes_of(x, out), p, out.raw_data(), context(out).stream);
}

void CudaBackend::upsample2d_backward(const Tensor& grad_out, const Upsample2dParams& p, const Tensor& grad_x) {
  check_device("upsample2d_backward", grad_x.device(), {&grad_out});
  const Tensor g = as_contiguous(grad_out, grad_x.dtype());
  const Tensor acc = accumulator(grad_x);
  kernels::upsample2d_backward(grad_x.dtype(), g.raw_data(), planes_of(grad_x, g), p, grad_x.raw_data(), ptr(acc),
                               context(grad_x).stream);
}

void CudaBackend::embedding(const Tensor& weight_in, const Tensor& indices_in, const Tensor& out) {
  check_device("embedding", out.device(), {&weight_in, &indices_in});
  DeviceContext& ctx = context(out);
  const Tensor weight = as_contiguous(weight_in, out.dtype()), indices = as_contiguous(indices_in, kInt64);
  const int64_t v = weight.size(0), d = weight.size(1), k = indices.numel();
  const Tensor flag = scratch(sizeof(int), out.device());
  MT_CUDA_CHECK(cudaMemsetAsync(flag.raw_data(), 0, sizeof(int), ctx.stream));
  kernels::check_indices(indices.data_ptr<int64_t>(), k, v, /*allowed=*/0, static_cast<int*>(flag.raw_data()),
                         ctx.stream);
  int bad = 0;
  read_back(flag.raw_data(), &bad, sizeof(int), ctx);
  if (bad) {
    const std::vector<int64_t> idx = indices.to_vector<int64_t>();
    for (size_t i = 0; i < idx.size(); ++i)
      MT_CHECK(idx[i] >= 0 && idx[i] < v, "embedding: index ", idx[i], " at position ", i,
               " is out of range for a table of ", v, " rows");
  }
  kernels::embedding(weight.dtype(), weight.raw_data(), indices.data_ptr<int64_t>(), k, d, out.raw_data(), ctx.stream);
}

void CudaBackend::embedding_backward(const Tensor& grad_out, const Tensor& indices_in, int64_t padding_idx,
                                     const Tensor& grad_weight) {
  check_device("embedding_backward", grad_weight.device(), {&grad_out, &indices_in});
  const Tensor g = as_contiguous(grad_out, grad_weight.dtype()), indices = as_contiguous(indices_in, kInt64);
  const Tensor acc = accumulator(grad_weight);
  kernels::embedding_backward(grad_weight.dtype(), g.raw_data(), indices.data_ptr<int64_t>(), indices.numel(),
                              grad_weight.size(0), grad_weight.size(1), padding_idx, grad_weight.raw_data(), ptr(acc),
                              context(grad_weight).stream);
}

}  // namespace mixtrain::backends::cuda
