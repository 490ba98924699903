// Host side of the reductions on CUDA.
#include <vector>

#include "backends/reduce.h"
#include "backends/cuda/context.h"
#include "backends/cuda/operands.h"
#include "backends/cuda/cuda_check.h"

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

void register_reduce() {
  backends::reduce.set(DeviceType::CUDA, reduce);
}

}  // namespace mixtrain::backends::cuda
