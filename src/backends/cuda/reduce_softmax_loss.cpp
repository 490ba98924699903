// Host side of the reductions, softmax and the NLL loss on CUDA.
#include <vector>

#include "backends/cuda/context.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_check.h"

namespace mixtrain::backends::cuda {

void CudaBackend::reduce(ReduceOp op, const Tensor& x_in, int64_t outer, int64_t n, int64_t inner, const Tensor& out,
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

void CudaBackend::softmax(const Tensor& x_in, int64_t outer, int64_t n, int64_t inner, bool log, int64_t causal_rows,
                          const Tensor& out) {
  check_device("softmax", out.device(), {&x_in});
  MT_CHECK(out.is_contiguous() && out.dtype() == x_in.dtype(), "softmax: expected a contiguous output of the input's dtype");
  MT_CHECK(causal_rows == 0 || (inner == 1 && !log), "softmax: a causal mask needs rows (inner == 1), not log");
  const Tensor x = as_contiguous(x_in, x_in.dtype());
  kernels::softmax(x.dtype(), x.raw_data(), out.raw_data(), outer, n, inner, log, causal_rows, context(out).stream);
}

void CudaBackend::softmax_backward(const Tensor& y_in, const Tensor& grad_y_in, int64_t outer, int64_t n, int64_t inner,
                                   bool log, const Tensor& grad_x) {
  check_device("softmax_backward", grad_x.device(), {&y_in, &grad_y_in});
  const Tensor y = as_contiguous(y_in, grad_x.dtype()), g = as_contiguous(grad_y_in, grad_x.dtype());
  kernels::softmax_backward(grad_x.dtype(), y.raw_data(), g.raw_data(), grad_x.raw_data(), outer, n, inner, log,
                            context(grad_x).stream);
}

void CudaBackend::nll_loss(const Tensor& logp_in, const Tensor& target_in, int64_t outer, int64_t classes,
                           int64_t inner, const NllLossArgs& args, const Tensor& loss, const Tensor& count) {
  check_device("cross_entropy", loss.device(), {&logp_in, &target_in, &count});
  DeviceContext& ctx = context(loss);
  const Tensor logp = as_contiguous(logp_in, logp_in.dtype()), target = as_contiguous(target_in, kInt64);
  // An out-of-range class would read outside the row: check on the device, then read one flag
  // back (the only host synchronisation of the loss), naming the first bad target on failure.
  const Tensor flag = scratch(sizeof(int), loss.device());
  MT_CUDA_CHECK(cudaMemsetAsync(flag.raw_data(), 0, sizeof(int), ctx.stream));
  kernels::check_indices(target.data_ptr<int64_t>(), outer * inner, classes, args.ignore_index,
                         static_cast<int*>(flag.raw_data()), ctx.stream);
  int bad = 0;
  read_back(flag.raw_data(), &bad, sizeof(int), ctx);
  if (bad) {
    const std::vector<int64_t> t = target.to_vector<int64_t>();
    for (size_t k = 0; k < t.size(); ++k)
      MT_CHECK(t[k] == args.ignore_index || (t[k] >= 0 && t[k] < classes), "cross_entropy: target ", t[k],
               " at position ", k, " is out of range for ", classes, " classes (ignore_index is ", args.ignore_index,
               ")");
  }
  const Tensor ws = scratch(kernels::kNllWorkspaceBytes, loss.device());
  kernels::nll_loss(logp.dtype(), logp.raw_data(), target.data_ptr<int64_t>(), outer, classes, inner, args,
                    loss.raw_data(), count.data_ptr<int64_t>(), ws.raw_data(), ctx.stream);
}

void CudaBackend::nll_loss_backward(const Tensor& target_in, int64_t outer, int64_t classes, int64_t inner,
                                    const NllLossArgs& args, const Tensor& grad_loss, const Tensor& count,
                                    const Tensor& grad_logp) {
  check_device("cross_entropy backward", grad_logp.device(), {&target_in, &grad_loss, &count});
  const Tensor target = as_contiguous(target_in, kInt64);
  const Tensor g = as_contiguous(grad_loss, grad_logp.dtype());
  kernels::nll_loss_backward(grad_logp.dtype(), target.data_ptr<int64_t>(), outer, classes, inner, args, g.raw_data(),
                             count.data_ptr<int64_t>(), grad_logp.raw_data(), context(grad_logp).stream);
}

}  // namespace mixtrain::backends::cuda
