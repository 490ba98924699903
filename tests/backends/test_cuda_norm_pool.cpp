// CUDA batch norm, group norm, layer norm, max pooling, upsampling and embedding against the CPU
// backend, forward and backward, every dtype.
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

class CudaPool : public CudaTest {};

TEST_F(CudaPool, MaxPoolAndUpsamplingForwardAndBackward) {
  for (DType dt : float_types()) {
    const Tensor x = random_tensor({2, 3, 13, 14}, dt, 65);
    backends::Pool2dParams p;
    p.kernel_h = p.kernel_w = 3, p.stride_h = p.stride_w = 2, p.pad_h = p.pad_w = 1;
    const Tensor gy = random_tensor({2, 3, 7, 7}, dt, 66);
    compare_backends(std::string("max_pool2d ") + dtype_name(dt), {x, gy},
                     {{gy.shape(), dt, "y", exact()}, {gy.shape(), kInt64, "indices", exact()},
                      {x.shape(), dt, "grad_x", tolerance_for(dt)}},
                     [p](auto& bk, const auto& in, const auto& out) {
                       backends::max_pool2d(bk, in[0], p, out[0], out[1]);
                       backends::max_pool2d_backward(bk, in[1], out[1], out[2]);
                     });
    for (auto mode : {backends::UpsampleMode::Nearest, backends::UpsampleMode::Bilinear}) {
      for (bool align : {false, true}) {
        backends::Upsample2dParams u;
        u.mode = mode, u.align_corners = align;
        u.scale_h = align ? 12.0 / 29 : 13.0 / 30, u.scale_w = align ? 13.0 / 6 : 14.0 / 7;
        const Tensor gu = random_tensor({2, 3, 30, 7}, dt, 67);
        compare_backends(std::string("upsample ") + dtype_name(dt), {x, gu},
                         {{gu.shape(), dt, "y", tolerance_for(dt)}, {x.shape(), dt, "grad_x", tolerance_for(dt)}},
                         [u](auto& bk, const auto& in, const auto& out) {
                           backends::upsample2d(bk, in[0], u, out[0]);
                           backends::upsample2d_backward(bk, in[1], u, out[1]);
                         });
      }
    }
  }
}

TEST_F(CudaPool, EmbeddingGatherAndScatterWithPadding) {
  for (DType dt : float_types()) {
    const Tensor weight = random_tensor({50, 24}, dt, 68);
    const Tensor idx = randint(0, 50, {300}, TensorOptions(kInt64));  // many repeats
    const Tensor gy = random_tensor({300, 24}, dt, 69);
    compare_backends(std::string("embedding ") + dtype_name(dt), {weight, idx, gy},
                     {{{300, 24}, dt, "rows", exact()}, {weight.shape(), dt, "grad", tolerance_for(dt)}},
                     [](auto& bk, const auto& in, const auto& out) {
                       backends::embedding(bk, in[0], in[1], out[0]);
                       backends::embedding_backward(bk, in[2], in[1], /*padding_idx=*/7, out[1]);
                     });
  }
}

TEST_F(CudaPool, EmbeddingIndexOutOfRangeIsAnError) {
  const Tensor weight = randn({10, 4}, TensorOptions().device(gpu_device()));
  const Tensor idx = from_vector(std::vector<int64_t>{1, 2, 10}, {3}, TensorOptions(kInt64).device(gpu_device()));
  expect_error([&] { nn::functional::embedding(idx, weight); },
               "index 10 at position 2 is out of range for a table of 10 rows");
}

}  // namespace
}  // namespace mixtrain::testing
