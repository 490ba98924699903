// CUDA max pooling and upsampling against the CPU backend, forward and backward, every dtype.
#include "backends/cuda_test_util.h"

namespace mixtrain::testing {
namespace {

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

}  // namespace
}  // namespace mixtrain::testing
