// cuDNN convolutions against the CPU backend: conv2d with stride, padding, dilation and groups in
// all three directions, every dtype.
#include "backends/cuda_test_util.h"

namespace mixtrain::testing {
namespace {

class CudaConv : public CudaTest {};

TEST_F(CudaConv, ForwardAndBothBackwardsMatchTheCpu) {
  struct Case {
    int64_t n, c, h, w, cout, kh, kw;
    backends::Conv2dParams p;
  };
  backends::Conv2dParams plain, strided, dilated, grouped;
  strided.stride_h = strided.stride_w = 2, strided.pad_h = 1, strided.pad_w = 2;
  dilated.dilation_h = 2, dilated.dilation_w = 3, dilated.pad_h = dilated.pad_w = 2;
  grouped.groups = 4, grouped.pad_h = grouped.pad_w = 1;
  const Case cases[] = {{2, 3, 16, 16, 8, 3, 3, plain}, {2, 8, 15, 17, 16, 3, 3, strided},
                        {1, 4, 20, 21, 6, 3, 2, dilated}, {3, 8, 9, 9, 12, 3, 3, grouped}, {8, 16, 8, 8, 32, 1, 1, plain}};
  for (DType dt : float_types()) {
    if (dt == kFloat32) cuda::set_cudnn_allow_tf32(false);  // compare strict fp32 with the CPU
    for (const Case& c : cases) {
      const auto& p = c.p;
      const int64_t ho = (c.h + 2 * p.pad_h - p.dilation_h * (c.kh - 1) - 1) / p.stride_h + 1;
      const int64_t wo = (c.w + 2 * p.pad_w - p.dilation_w * (c.kw - 1) - 1) / p.stride_w + 1;
      const Tensor x = random_tensor({c.n, c.c, c.h, c.w}, dt, 41), w = random_tensor({c.cout, c.c / p.groups, c.kh, c.kw}, dt, 42);
      const Tensor bias = random_tensor({c.cout}, dt, 43), gy = random_tensor({c.n, c.cout, ho, wo}, dt, 44);
      Tolerance tol = gemm_tolerance(dt, c.c / p.groups * c.kh * c.kw);  // a convolution is a GEMM over C*kh*kw
      compare_backends(std::string("conv2d ") + dtype_name(dt) + " groups=" + std::to_string(p.groups), {x, w, bias, gy},
                       {{gy.shape(), dt, "y", tol}, {x.shape(), dt, "grad_x", tol}, {w.shape(), dt, "grad_w", tol}},
                       [p](auto& bk, const auto& in, const auto& out) {
                         backends::conv2d(bk, in[0], in[1], in[2], p, out[0]);
                         backends::conv2d_backward_input(bk, in[3], in[1], p, out[1]);
                         backends::conv2d_backward_weight(bk, in[3], in[0], p, out[2]);
                       });
    }
    cuda::set_cudnn_allow_tf32(true);
  }
}

TEST_F(CudaConv, BenchmarkModeGivesTheSameResults) {
  const Tensor x = random_tensor({4, 16, 32, 32}, kFloat16, 45).to(gpu_device());
  const Tensor w = random_tensor({32, 16, 3, 3}, kFloat16, 46).to(gpu_device());
  const Tensor y = nn::functional::conv2d(x, w, Tensor(), 1, 1);
  cuda::set_cudnn_benchmark(true);
  const Tensor yb = nn::functional::conv2d(x, w, Tensor(), 1, 1);
  cuda::set_cudnn_benchmark(false);
  EXPECT_TRUE(all_close(yb, to_doubles(y), tolerance_for(kFloat16)));
}

}  // namespace
}  // namespace mixtrain::testing
