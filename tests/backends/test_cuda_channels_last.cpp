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
// then backward of sum(out * g); compares outputs and input gradients. gpu_layout: the layout the
// GPU's output and input gradient must have.
void compare_op(const std::string& what, const Op& op, const std::vector<Tensor>& inputs, const Tolerance& tol,
                MemoryFormat gpu_layout = MemoryFormat::ChannelsLast) {
  SCOPED_TRACE(what);
  std::vector<Tensor> cpu_in, gpu_in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = i == 0 ? inputs[i].contiguous(MemoryFormat::ChannelsLast) : inputs[i];
    cpu_in.push_back(t.detach().clone().set_requires_grad(true));
    gpu_in.push_back(on(t, gpu_device()).detach().set_requires_grad(true));
  }
  ASSERT_EQ(gpu_in[0].suggest_memory_format(), MemoryFormat::ChannelsLast) << "the move kept the layout";
  const Tensor out_cpu = op(cpu_in), out_gpu = op(gpu_in);
  EXPECT_EQ(out_gpu.suggest_memory_format(), gpu_layout);
  EXPECT_TRUE(all_close(out_gpu, to_doubles(out_cpu), tol)) << "output";
  const Tensor g = random_tensor(out_cpu.shape(), out_cpu.dtype(), 77);
  (out_cpu * g).sum().backward();
  (out_gpu * on(g, gpu_device())).sum().backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(gpu_in[i].grad().defined()) << "input " << i;
    EXPECT_TRUE(all_close(gpu_in[i].grad(), to_doubles(cpu_in[i].grad()), tol)) << "gradient of input " << i;
  }
  EXPECT_EQ(gpu_in[0].grad().suggest_memory_format(), gpu_layout);
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

// The cases a network meets beyond the plain one: a first layer with 1 or 3 channels (not a
// multiple of 8), grouped and depthwise weights, stride with dilation, channel counts that leave
// tails in the row kernels (48), eval-mode batch norm, and fp64 (which cuDNN runs NCHW).
TEST_F(CudaChannelsLast, FirstLayersGroupsDilationEvalNormAndFp64) {
  const bool tf32 = cuda::cudnn_allow_tf32();
  cuda::set_cudnn_allow_tf32(false);
  using nn::functional::conv2d;
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    const std::string name = dtype_name(dt);
    for (int64_t cin : {1, 3}) {
      compare_op("conv2d C_in=" + std::to_string(cin) + " " + name,
                 [](const auto& in) { return conv2d(in[0], in[1], in[2], 1, 1); },
                 {random_tensor({2, cin, 9, 11}, dt, 10 + cin), random_tensor({16, cin, 3, 3}, dt, 12, -0.3, 0.3),
                  random_tensor({16}, dt, 13)},
                 loose(dt));
    }
    const Tensor x = random_tensor({2, 8, 11, 10}, dt, 14);
    compare_op("conv2d groups=4 " + name, [](const auto& in) { return conv2d(in[0], in[1], Tensor(), 1, 1, 1, 4); },
               {x, random_tensor({8, 2, 3, 3}, dt, 15, -0.3, 0.3)}, loose(dt));
    compare_op("conv2d depthwise " + name, [](const auto& in) { return conv2d(in[0], in[1], Tensor(), 1, 1, 1, 8); },
               {x, random_tensor({8, 1, 3, 3}, dt, 16, -0.3, 0.3)}, loose(dt));
    compare_op("conv2d stride 2 dilation 2 " + name,
               [](const auto& in) { return conv2d(in[0], in[1], in[2], 2, 2, 2); },
               {x, random_tensor({16, 8, 3, 3}, dt, 17, -0.3, 0.3), random_tensor({16}, dt, 18)}, loose(dt));
    const Tensor wide = random_tensor({3, 48, 5, 7}, dt, 19);
    compare_op("max_pool2d C=48 " + name, [](const auto& in) { return nn::functional::max_pool2d(in[0], 2); }, {wide},
               tolerance_for(dt));
    for (bool training : {true, false}) {
      Tensor rm = random_tensor({48}, kFloat32, 20), rv = add(random_tensor({48}, kFloat32, 21, 0.0, 1.0), 0.5);
      compare_op(std::string("batch_norm C=48 ") + (training ? "training " : "eval ") + name,
                 [&](const auto& in) {
                   Tensor m = rm.to(in[0].device()), v = rv.to(in[0].device());
                   return nn::functional::batch_norm(in[0], m, v, in[1], in[2], training, 0.1, 1e-5);
                 },
                 {wide, random_tensor({48}, kFloat32, 22), random_tensor({48}, kFloat32, 23)}, loose(dt));
    }
  }
  compare_op("conv2d fp64", [](const auto& in) { return conv2d(in[0], in[1], in[2], 1, 1); },
             {random_tensor({2, 8, 6, 7}, kFloat64, 24), random_tensor({16, 8, 3, 3}, kFloat64, 25),
              random_tensor({16}, kFloat64, 26)},
             tolerance_for(kFloat64), MemoryFormat::Contiguous);
  cuda::set_cudnn_allow_tf32(tf32);
}

}  // namespace
}  // namespace mixtrain::testing

namespace mixtrain::testing {
namespace {

// A channels-last model (weights too: Module::to(MemoryFormat)) trained under fp16 autocast with
// AdamW and a GradScaler on the GPU: the same losses as on the CPU, and the optimizer's state on
// the device stays channels-last (the fused kernels walk the operands as flat arrays).
TEST_F(CudaChannelsLast, ChannelsLastModelTrainsAsOnTheCpu) {
  std::vector<double> losses[2];
  for (int d = 0; d < 2; ++d) {
    const Device dev = d == 0 ? Device::cpu() : gpu_device();
    manual_seed(11);
    nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(3, 16, 3).padding(1)), nn::ReLU(), nn::BatchNorm2d(16),
                       nn::Conv2d(nn::Conv2dOptions(16, 8, 3).padding(1)));
    net->to(dev);
    net->to(MemoryFormat::ChannelsLast);
    optim::AdamW opt(net->parameters(), optim::AdamWOptions(1e-2));
    amp::GradScaler scaler;
    for (int s = 0; s < 5; ++s) {
      const Tensor x = on(random_tensor({4, 3, 12, 12}, kFloat32, 30 + s), dev).contiguous(MemoryFormat::ChannelsLast);
      const Tensor y = on(random_tensor({4, 8, 12, 12}, kFloat32, 40 + s), dev);
      opt.zero_grad();
      Tensor loss;
      {
        amp::AutocastGuard autocast(dev.type, kFloat16);
        loss = nn::functional::mse_loss(net->forward(x).to(kFloat32), y);
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      losses[d].push_back(loss.item<double>());
    }
    for (const auto& [name, t] : opt.state_tensors())
      if (t.dim() == 4) EXPECT_EQ(t.suggest_memory_format(), MemoryFormat::ChannelsLast) << name;
  }
  for (size_t i = 0; i < losses[0].size(); ++i)
    EXPECT_NEAR(losses[1][i], losses[0][i], 5e-3 * std::abs(losses[0][i])) << "step " << i;
}

}  // namespace
}  // namespace mixtrain::testing
