// Channels-last (NHWC) convolutions, batch norm and max pooling on the GPU against the same ops
// on the CPU, forward and backward, for each floating dtype: cuDNN's NHWC descriptors, the NHWC
// pooling kernels and batch norm over the [N * H * W, C] view. Outputs and gradients must keep
// the layout on the GPU too.
#include <functional>

#include "backends/cuda_test_util.h"

namespace mixtrain::testing {
namespace {

class CudaChannelsLast : public CudaTest {};

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs op on the CPU and on the GPU with the first input channels-last (the others as given),
// then backward of sum(out * g); compares outputs and input gradients.
void compare_op(const std::string& what, const Op& op, const std::vector<Tensor>& inputs, const Tolerance& tol) {
  SCOPED_TRACE(what);
  std::vector<Tensor> cpu_in, gpu_in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = i == 0 ? inputs[i].contiguous(MemoryFormat::ChannelsLast) : inputs[i];
    cpu_in.push_back(t.detach().clone().set_requires_grad(true));
    gpu_in.push_back(on(t, gpu_device()).detach().set_requires_grad(true));
  }
  ASSERT_EQ(gpu_in[0].suggest_memory_format(), MemoryFormat::ChannelsLast) << "the move kept the layout";
  const Tensor out_cpu = op(cpu_in), out_gpu = op(gpu_in);
  EXPECT_EQ(out_gpu.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_TRUE(all_close(out_gpu, to_doubles(out_cpu), tol)) << "output";
  const Tensor g = random_tensor(out_cpu.shape(), out_cpu.dtype(), 77);
  (out_cpu * g).sum().backward();
  (out_gpu * on(g, gpu_device())).sum().backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(gpu_in[i].grad().defined()) << "input " << i;
    EXPECT_TRUE(all_close(gpu_in[i].grad(), to_doubles(cpu_in[i].grad()), tol)) << "gradient of input " << i;
  }
  EXPECT_EQ(gpu_in[0].grad().suggest_memory_format(), MemoryFormat::ChannelsLast);
}

Tolerance loose(DType dt) {
  Tolerance t = tolerance_for(dt);
  if (dt == kFloat32) t = {2e-5, 2e-4, 2e-6};  // TF32 is off below; sums run in another order
  return t;
}

TEST_F(CudaChannelsLast, ConvolutionsBatchNormAndMaxPoolMatchTheCpu) {
  const bool tf32 = cuda::cudnn_allow_tf32();
  cuda::set_cudnn_allow_tf32(false);
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    const std::string name = dtype_name(dt);
    const Tensor x = random_tensor({2, 8, 10, 12}, dt, 1);
    compare_op("conv2d " + name,
               [](const auto& in) { return nn::functional::conv2d(in[0], in[1], in[2], 1, 1); },
               {x, random_tensor({16, 8, 3, 3}, dt, 2, -0.3, 0.3), random_tensor({16}, dt, 3)}, loose(dt));
    compare_op("conv2d 1x1 " + name,
               [](const auto& in) { return nn::functional::conv2d(in[0], in[1], in[2]); },
               {x, random_tensor({4, 8, 1, 1}, dt, 4), random_tensor({4}, dt, 5)}, loose(dt));
    compare_op("conv_transpose2d " + name,
               [](const auto& in) { return nn::functional::conv_transpose2d(in[0], in[1], in[2], 2); },
               {x, random_tensor({8, 4, 2, 2}, dt, 6), random_tensor({4}, dt, 7)}, loose(dt));
    compare_op("max_pool2d " + name, [](const auto& in) { return nn::functional::max_pool2d(in[0], 2); }, {x},
               tolerance_for(dt));
    compare_op("max_pool2d 3/2/1 " + name,
               [](const auto& in) { return nn::functional::max_pool2d(in[0], 3, 2, 1); }, {x}, tolerance_for(dt));
    Tensor rm = zeros({8}), rv = ones({8});
    compare_op("batch_norm " + name,
               [&](const auto& in) {
                 Tensor m = rm.to(in[0].device()), v = rv.to(in[0].device());
                 return nn::functional::batch_norm(in[0], m, v, in[1], in[2], true, 0.1, 1e-5);
               },
               {x, random_tensor({8}, kFloat32, 8), random_tensor({8}, kFloat32, 9)}, loose(dt));
  }
  cuda::set_cudnn_allow_tf32(tf32);
}

}  // namespace
}  // namespace mixtrain::testing
