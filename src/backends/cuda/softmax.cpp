// Host side of softmax and log-softmax on CUDA.
#include <vector>

#include "backends/softmax.h"
#include "backends/cuda/context.h"
#include "backends/cuda/operands.h"
#include "backends/cuda/cuda_check.h"
#include "kernels/cuda/softmax.h"

namespace mixtrain::backends::cuda {

void softmax(const Tensor& x_in, int64_t outer, int64_t n, int64_t inner, bool log, int64_t causal_rows,
                          const Tensor& out) {
  check_device("softmax", out.device(), {&x_in});
  MT_CHECK(out.is_contiguous() && out.dtype() == x_in.dtype(), "softmax: expected a contiguous output of the input's dtype");
  MT_CHECK(causal_rows == 0 || (inner == 1 && !log), "softmax: a causal mask needs rows (inner == 1), not log");
  const Tensor x = as_contiguous(x_in, x_in.dtype());
  kernels::softmax(x.dtype(), x.raw_data(), out.raw_data(), outer, n, inner, log, causal_rows, context(out).stream);
}

void softmax_backward(const Tensor& y_in, const Tensor& grad_y_in, int64_t outer, int64_t n, int64_t inner,
                                   bool log, const Tensor& grad_x) {
  check_device("softmax_backward", grad_x.device(), {&y_in, &grad_y_in});
  const Tensor y = as_contiguous(y_in, grad_x.dtype()), g = as_contiguous(grad_y_in, grad_x.dtype());
  kernels::softmax_backward(grad_x.dtype(), y.raw_data(), g.raw_data(), grad_x.raw_data(), outer, n, inner, log,
                            context(grad_x).stream);
}

void register_softmax() {
  backends::softmax.set(DeviceType::CUDA, softmax);
  backends::softmax_backward.set(DeviceType::CUDA, softmax_backward);
}

}  // namespace mixtrain::backends::cuda
