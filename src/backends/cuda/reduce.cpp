// Host side of the reductions on CUDA.
#include <vector>

#include "backends/reduce.h"
#include "backends/cuda/context.h"
#include "backends/cuda/operands.h"
#include "backends/cuda/cuda_check.h"
#include "kernels/cuda/reduce.h"

namespace mixtrain::backends::cuda {

void reduce(ReduceOp op, const Tensor& x_in, int64_t outer, int64_t n, int64_t inner, const Tensor& out,
                         const Tensor& indices) {
  check_device("reduce", out.device(), {&x_in, &indices});
  MT_CHECK(out.is_contiguous() && (!indices.defined() || indices.is_contiguous()), "reduce: expected contiguous outputs");
  DeviceContext& ctx = context(out);
  const Tensor x = as_contiguous(x_in, x_in.dtype());
  const size_t ws_bytes = kernels::reduce_workspace_bytes(x.dtype(), outer, n, inner);
  const Tensor ws = ws_bytes ? scratch(ws_bytes, out.device()) : Tensor();
  kernels::reduce(op, x.dtype(), out.dtype(), x.raw_data(), out.raw_data(),
                  indices.defined() ? indices.data_ptr<int64_t>() : nullptr, outer, n, inner, ptr(ws), ctx.stream);
}

void topk(const Tensor& x_in, int64_t rows, int64_t n, int64_t k, bool largest, const Tensor& values,
          const Tensor& indices) {
  check_device("topk", values.device(), {&x_in, &indices});
  MT_CHECK(values.is_contiguous() && indices.is_contiguous(), "topk: expected contiguous outputs");
  const Tensor x = as_contiguous(x_in, x_in.dtype());
  kernels::topk(x.dtype(), x.raw_data(), rows, n, k, largest, values.raw_data(), indices.data_ptr<int64_t>(),
                context(values).stream);
}

void topk_backward(const Tensor& grad_in, const Tensor& indices_in, int64_t rows, int64_t n, int64_t k,
                   const Tensor& grad_x) {
  check_device("topk_backward", grad_x.device(), {&grad_in, &indices_in});
  MT_CHECK(grad_x.is_contiguous(), "topk_backward: expected a contiguous output");
  const Tensor grad = as_contiguous(grad_in, grad_x.dtype());
  const Tensor indices = as_contiguous(indices_in, DType::Int64);
  kernels::topk_backward(grad_x.dtype(), grad.raw_data(), indices.data_ptr<int64_t>(), rows, n, k, grad_x.raw_data(),
                         context(grad_x).stream);
}

void register_reduce() {
  backends::reduce.set(DeviceType::CUDA, reduce);
  backends::topk.set(DeviceType::CUDA, topk);
  backends::topk_backward.set(DeviceType::CUDA, topk_backward);
}

}  // namespace mixtrain::backends::cuda
