// Host side of the negative log-likelihood loss on CUDA.
#include <vector>

#include "backends/loss.h"
#include "backends/cuda/context.h"
#include "backends/cuda/operands.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/workspace.h"
#include "kernels/cuda/loss.h"

namespace mixtrain::backends::cuda {

void nll_loss(const Tensor& logp_in, const Tensor& target_in, int64_t outer, int64_t classes,
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
  const Tensor ws = scratch(kNllWorkspaceBytes, loss.device());
  kernels::nll_loss(logp.dtype(), logp.raw_data(), target.data_ptr<int64_t>(), outer, classes, inner, args,
                    loss.raw_data(), count.data_ptr<int64_t>(), ws.raw_data(), ctx.stream);
}

void nll_loss_backward(const Tensor& target_in, int64_t outer, int64_t classes, int64_t inner,
                                    const NllLossArgs& args, const Tensor& grad_loss, const Tensor& count,
                                    const Tensor& grad_logp) {
  check_device("cross_entropy backward", grad_logp.device(), {&target_in, &grad_loss, &count});
  const Tensor target = as_contiguous(target_in, kInt64);
  const Tensor g = as_contiguous(grad_loss, grad_logp.dtype());
  kernels::nll_loss_backward(grad_logp.dtype(), target.data_ptr<int64_t>(), outer, classes, inner, args, g.raw_data(),
                             count.data_ptr<int64_t>(), grad_logp.raw_data(), context(grad_logp).stream);
}

void register_loss() {
  backends::nll_loss.set(DeviceType::CUDA, nll_loss);
  backends::nll_loss_backward.set(DeviceType::CUDA, nll_loss_backward);
}

}  // namespace mixtrain::backends::cuda
