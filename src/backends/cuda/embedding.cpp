// Host side of the embedding lookup and its backward on CUDA.
#include "backends/embedding.h"
#include "backends/cuda/context.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/operands.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/loss.h"

namespace mixtrain::backends::cuda {

namespace {
// The fp32 accumulation buffer a half gradient's scatter-add needs (none for fp32/fp64).
Tensor accumulator(const Tensor& grad) {
  return is_half(grad.dtype()) ? scratch(sizeof(float) * static_cast<size_t>(grad.numel()), grad.device()) : Tensor();
}
}  // namespace

void embedding(const Tensor& weight_in, const Tensor& indices_in, const Tensor& out) {
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

void embedding_backward(const Tensor& grad_out, const Tensor& indices_in, int64_t padding_idx,
                                     const Tensor& grad_weight) {
  check_device("embedding_backward", grad_weight.device(), {&grad_out, &indices_in});
  const Tensor g = as_contiguous(grad_out, grad_weight.dtype()), indices = as_contiguous(indices_in, kInt64);
  const Tensor acc = accumulator(grad_weight);
  kernels::embedding_backward(grad_weight.dtype(), g.raw_data(), indices.data_ptr<int64_t>(), indices.numel(),
                              grad_weight.size(0), grad_weight.size(1), padding_idx, grad_weight.raw_data(), ptr(acc),
                              context(grad_weight).stream);
}

void register_embedding() {
  backends::embedding.set(DeviceType::CUDA, embedding);
  backends::embedding_backward.set(DeviceType::CUDA, embedding_backward);
}

}  // namespace mixtrain::backends::cuda
