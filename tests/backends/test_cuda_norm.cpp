// CUDA batch norm, group norm and layer norm against the CPU backend, forward and backward, every
// dtype.
#include "backends/cuda_test_util.h"

namespace mixtrain::testing {
namespace {

DType stat_of(DType dt) { return dt == kFloat64 ? kFloat64 : kFloat32; }

// Normalization sums a few thousand terms: fp32 statistics in another order.
Tolerance norm_tolerance(DType dt) {
  Tolerance t = tolerance_for(dt);
  if (dt == kFloat32) t = {2e-5, 2e-4, 2e-6};
  return t;
}

class CudaNorm : public CudaTest {};

TEST_F(CudaNorm, BatchNormTrainingAndEval) {
  for (DType dt : float_types()) {
    for (bool big : {false, true}) {
      const int64_t n = big ? 8 : 3, c = big ? 16 : 5, s = big ? 64 * 64 : 7;
      const DType sd = stat_of(dt);
      const Tensor x = random_tensor({n, c, s}, dt, 51, -2, 3), gy = random_tensor({n, c, s}, dt, 52);
      const Tensor w = random_tensor({c}, sd, 53), b = random_tensor({c}, sd, 54);
      const Tensor rm0 = random_tensor({c}, kFloat32, 55), rv0 = random_tensor({c}, kFloat32, 56, 0.5, 1.5);
      const Tolerance tol = norm_tolerance(dt), st = norm_tolerance(sd);
      compare_backends(std::string("batch_norm ") + dtype_name(dt), {x, gy, w, b, rm0, rv0},
                       {{{c}, sd, "mean", st}, {{c}, sd, "invstd", st}, {{c}, kFloat32, "running_mean", st},
                        {{c}, kFloat32, "running_var", st}, {x.shape(), dt, "y", tol}, {x.shape(), dt, "grad_x", tol},
                        {{c}, sd, "grad_w", st}, {{c}, sd, "grad_b", st}, {x.shape(), dt, "grad_x eval", tol}},
                       [=](auto& bk, const auto& in, const auto& out) {
                         backends::copy(bk, in[4], out[2]);
                         backends::copy(bk, in[5], out[3]);
                         backends::batch_norm_stats(bk, in[0], n, c, s, 1e-5, out[0], out[1], out[2], out[3], 0.1);
                         backends::batch_norm(bk, in[0], n, c, s, out[0], out[1], in[2], in[3], out[4]);
                         backends::batch_norm_backward(bk, in[0], in[1], n, c, s, out[0], out[1], in[2], true, out[5], out[6], out[7]);
                         backends::batch_norm_backward(bk, in[0], in[1], n, c, s, out[0], out[1], in[2], false, out[8], Tensor(),
                                                Tensor());
                       });
    }
  }
}

TEST_F(CudaNorm, LayerNormAndGroupNorm) {
  for (DType dt : float_types()) {
    const DType sd = stat_of(dt);
    const Tolerance tol = norm_tolerance(dt), st = norm_tolerance(sd);
    for (int64_t cols : {int64_t{64}, int64_t{768}, int64_t{3000}}) {
      const int64_t rows = 200;
      const Tensor x = random_tensor({rows, cols}, dt, 57, -1, 4), gy = random_tensor({rows, cols}, dt, 58);
      const Tensor w = random_tensor({cols}, dt, 59), b = random_tensor({cols}, dt, 60);
      compare_backends(std::string("layer_norm ") + dtype_name(dt) + " cols=" + std::to_string(cols), {x, gy, w, b},
                       {{x.shape(), dt, "y", tol}, {{rows}, sd, "mean", st}, {{rows}, sd, "rstd", st},
                        {x.shape(), dt, "grad_x", tol}, {{cols}, dt, "grad_w", tol}, {{cols}, dt, "grad_b", tol}},
                       [=](auto& bk, const auto& in, const auto& out) {
                         backends::layer_norm(bk, in[0], rows, cols, 1e-5, in[2], in[3], out[0], out[1], out[2]);
                         backends::layer_norm_backward(bk, in[0], in[1], rows, cols, out[1], out[2], in[2], out[3], out[4], out[5]);
                       });
    }
    const int64_t n = 3, c = 12, s = 50, groups = 4;
    const Tensor x = random_tensor({n, c, s}, dt, 61), gy = random_tensor({n, c, s}, dt, 62);
    const Tensor w = random_tensor({c}, kFloat32, 63), b = random_tensor({c}, kFloat32, 64);
    compare_backends(std::string("group_norm ") + dtype_name(dt), {x, gy, w, b},
                     {{x.shape(), dt, "y", tol}, {{n, groups}, sd, "mean", st}, {{n, groups}, sd, "rstd", st},
                      {x.shape(), dt, "grad_x", tol}, {{c}, kFloat32, "grad_w", st}, {{c}, kFloat32, "grad_b", st}},
                     [=](auto& bk, const auto& in, const auto& out) {
                       backends::group_norm(bk, in[0], n, c, s, groups, 1e-5, in[2], in[3], out[0], out[1], out[2]);
                       backends::group_norm_backward(bk, in[0], in[1], n, c, s, groups, out[1], out[2], in[2], out[3], out[4],
                                              out[5]);
                     });
  }
}

}  // namespace
}  // namespace mixtrain::testing
