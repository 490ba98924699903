// CUDA softmax and log_softmax, forward and backward, against the CPU backend on short and long
// rows and strided axes.
#include "backends/cuda_test_util.h"

namespace mixtrain::testing {
namespace {

class CudaSoftmax : public CudaTest {};

TEST_F(CudaSoftmax, SoftmaxForwardAndBackwardMatchTheCpu) {
  const View3 views[] = {{200, 10, 1}, {40, 1024, 1}, {8, 5000, 1}, {4, 30, 17}};
  for (DType dt : float_types()) {
    for (const View3& v : views) {
      for (bool log : {false, true}) {
        const Tensor x = random_tensor({v.outer, v.n, v.inner}, dt, 22, -8, 8);
        const Tensor g = random_tensor({v.outer, v.n, v.inner}, dt, 23);
        compare_backends(std::string(log ? "log_softmax " : "softmax ") + dtype_name(dt) + " n=" + std::to_string(v.n),
                         {x, g}, {{x.shape(), dt, "y", tolerance_for(dt)}, {x.shape(), dt, "grad_x", tolerance_for(dt)}},
                         [v, log](auto& b, const auto& in, const auto& out) {
                           backends::softmax(b, in[0], v.outer, v.n, v.inner, log, 0, out[0]);
                           backends::softmax_backward(b, out[0], in[1], v.outer, v.n, v.inner, log, out[1]);
                         });
      }
    }
    // Causal attention rows: [B*H = 6, L, S] scores, L < S, L == S, and rows longer than a warp's limit.
    for (const auto& [l, s] : {std::pair<int64_t, int64_t>{7, 12}, {64, 64}, {3, 1500}}) {
      const Tensor x = random_tensor({6 * l, s}, dt, 25, -8, 8), g = random_tensor({6 * l, s}, dt, 26);
      compare_backends(std::string("causal softmax ") + dtype_name(dt) + " L=" + std::to_string(l), {x, g},
                       {{x.shape(), dt, "y", tolerance_for(dt)}, {x.shape(), dt, "grad_x", tolerance_for(dt)}},
                       [l = l, s = s](auto& b, const auto& in, const auto& out) {
                         backends::softmax(b, in[0], 6 * l, s, 1, false, l, out[0]);
                         backends::softmax_backward(b, out[0], in[1], 6 * l, s, 1, false, out[1]);
                       });
    }
  }
}

}  // namespace
}  // namespace mixtrain::testing
