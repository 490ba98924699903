// The GradScaler's kernels and the fused optimizer updates on CUDA against the CPU backend, the
// caching allocator on the device, and whole training steps under autocast on the GPU compared
// with the same steps on the CPU.
#include "backends/amp.h"
#include "backends/cuda_test_util.h"

namespace mixtrain::testing {
namespace {

class CudaAmp : public CudaTest {};

TEST_F(CudaAmp, CheckAndUnscaleFindsInfAndMatchesTheCpu) {
  for (DType gd : float_types()) {
    // Outputs in the gradients' dtype (in place), or fp32 master gradients for half gradients.
    for (DType od : is_half(gd) ? std::vector<DType>{gd, kFloat32} : std::vector<DType>{gd}) {
      for (bool with_inf : {false, true}) {
        // Several tensors, one longer than a chunk, one tiny; a non-finite value in the last.
        std::vector<Tensor> grads{mul(random_tensor({70000}, kFloat32, 71), 100.0).to(gd),
                                  random_tensor({3}, gd, 72), random_tensor({129, 5}, gd, 73)};
        if (with_inf) grads[2] = where(gt(random_tensor({129, 5}, kFloat32, 74), full({}, 0.999)),
                                       full({}, INFINITY, TensorOptions(gd)), grads[2]);
        std::vector<Tensor> ins = grads;
        ins.push_back(full({}, 1.0 / 1024, TensorOptions(kFloat32)));
        std::vector<OutputSpec> outs;
        for (const Tensor& g : grads) outs.push_back({g.shape(), od, "out", exact()});
        outs.push_back({{}, kFloat32, "found_inf", exact()});
        outs.push_back({{backends::kAmpStatsSize}, kFloat64, "stats", exact()});
        compare_backends(std::string("unscale ") + dtype_name(gd) + " -> " + dtype_name(od), ins, outs,
                         [](auto& bk, const auto& in, const auto& out) {
                           const size_t n = in.size() - 1;
                           backends::fill(bk, out[n], 0.0);
                           backends::fill(bk, out[n + 1], 0.0);
                           backends::non_finite_check_and_unscale(bk, {in.begin(), in.begin() + n}, {out.begin(), out.begin() + n},
                                                           in[n], out[n], out[n + 1]);
                         });
      }
    }
  }
}

TEST_F(CudaAmp, ScaleUpdateFollowsTheCpuThroughASequence) {
  backends::ScaleUpdateArgs args;
  args.growth_interval = 3;
  args.hysteresis = 2;
  args.min_scale = 1.0;
  const std::vector<int> overflow{0, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  Device devs[2] = {Device::cpu(), gpu_device()};
  Tensor scale[2], growth[2], hyst[2], at_min[2];
  for (int d = 0; d < 2; ++d) {
    scale[d] = full({}, 65536.0, TensorOptions(kFloat32).device(devs[d]));
    growth[d] = zeros({}, TensorOptions(kInt32).device(devs[d]));
    hyst[d] = full({}, 2.0, TensorOptions(kInt32).device(devs[d]));
    at_min[d] = zeros({}, TensorOptions(kFloat32).device(devs[d]));
  }
  for (size_t i = 0; i < overflow.size(); ++i) {
    for (int d = 0; d < 2; ++d) {
      const Tensor found = full({}, overflow[i], TensorOptions(kFloat32).device(devs[d]));
      backends::update_scale(devs[d].type, scale[d], growth[d], hyst[d], found, args, at_min[d]);
    }
    ASSERT_EQ(scale[1].item<float>(), scale[0].item<float>()) << "step " << i;
    ASSERT_EQ(growth[1].item<int32_t>(), growth[0].item<int32_t>()) << "step " << i;
    ASSERT_EQ(hyst[1].item<int32_t>(), hyst[0].item<int32_t>()) << "step " << i;
    ASSERT_EQ(at_min[1].item<float>(), at_min[0].item<float>()) << "step " << i;
  }
}

TEST_F(CudaAmp, FusedOptimizerUpdatesMatchTheCpu) {
  struct Case {
    DType weight, grad;
    bool half_out;
  };
  const Case cases[] = {{kFloat32, kFloat32, false}, {kFloat64, kFloat64, false}, {kFloat32, kFloat16, true},
                        {kFloat32, kBFloat16, true}, {kFloat16, kFloat16, false}};
  for (const Case& c : cases) {
    const Shape shape{1000, 3};
    const Tensor w = random_tensor(shape, c.weight, 75), g = random_tensor(shape, c.grad, 76);
    const Tensor m = random_tensor(shape, c.weight, 77), v = random_tensor(shape, c.weight, 78, 0.0, 0.01);
    const Tolerance tol = tolerance_for(c.weight == kFloat16 ? kFloat16 : c.weight);
    const DType hd = c.grad;
    for (bool decoupled : {false, true}) {
      backends::AdamArgs a;
      a.lr = 1e-2, a.weight_decay = 0.1, a.decoupled = decoupled, a.amsgrad = !decoupled, a.step = 3;
      compare_backends(std::string("adam ") + dtype_name(c.weight) + "/" + dtype_name(c.grad), {w, g, m, v},
                       {{shape, c.weight, "weight", tol}, {shape, c.weight, "exp_avg", tol},
                        {shape, c.weight, "exp_avg_sq", tol}, {shape, c.weight, "max_exp_avg_sq", tol},
                        {shape, hd, "half_out", tolerance_for(hd)}},
                       [a, c](auto& bk, const auto& in, const auto& out) {
                         backends::copy(bk, in[0], out[0]);
                         backends::copy(bk, in[2], out[1]);
                         backends::copy(bk, in[3], out[2]);
                         backends::copy(bk, in[3], out[3]);
                         if (!c.half_out) backends::copy(bk, in[1], out[4]);  // untouched: compared as copied
                         backends::adam_step(bk, out[0], in[1], out[1], out[2], a.amsgrad ? out[3] : Tensor(),
                                      c.half_out ? out[4] : Tensor(), a, {});
                       });
    }
    backends::SgdArgs s;
    s.lr = 0.1, s.momentum = 0.9, s.weight_decay = 0.01, s.nesterov = true;
    compare_backends(std::string("sgd ") + dtype_name(c.weight), {w, g, m},
                     {{shape, c.weight, "weight", tol}, {shape, c.weight, "buf", tol}},
                     [s](auto& bk, const auto& in, const auto& out) {
                       backends::copy(bk, in[0], out[0]);
                       backends::copy(bk, in[2], out[1]);
                       backends::sgd_step(bk, out[0], in[1], out[1], Tensor(), s, {});
                     });
    // Gated on a device flag (GradScaler's sync-free skip): open, with two skips counted before,
    // the kernels run step a.step - 2 (Adam's bias corrections, SGD's buffer initialisation at
    // step 1); closed, they change nothing but the counter.
    for (const float flag : {0.0f, 1.0f}) {
      const Tensor found = full({}, flag, TensorOptions(kFloat32));
      const Tensor skipped = full({}, 2.0, TensorOptions(kInt32));
      backends::AdamArgs a;
      a.lr = 1e-2, a.weight_decay = 0.1, a.step = 5;
      const std::string tag = flag == 0.0f ? " open" : " closed";
      compare_backends(std::string("gated adam ") + dtype_name(c.weight) + tag, {w, g, m, v, found, skipped},
                       {{shape, c.weight, "weight", tol}, {shape, c.weight, "exp_avg", tol},
                        {shape, c.weight, "exp_avg_sq", tol}, {{}, kInt32, "skipped_steps", exact()}},
                       [a](auto& bk, const auto& in, const auto& out) {
                         backends::copy(bk, in[0], out[0]);
                         backends::copy(bk, in[2], out[1]);
                         backends::copy(bk, in[3], out[2]);
                         backends::copy(bk, in[5], out[3]);
                         backends::adam_step(bk, out[0], in[1], out[1], out[2], Tensor(), Tensor(), a, {in[4], out[3]});
                       });
      backends::SgdArgs gs = s;
      gs.step = 3;  // 3 - 2 skips: the first step taken, so buf = g
      compare_backends(std::string("gated sgd ") + dtype_name(c.weight) + tag, {w, g, m, found, skipped},
                       {{shape, c.weight, "weight", tol}, {shape, c.weight, "buf", tol},
                        {{}, kInt32, "skipped_steps", exact()}},
                       [gs](auto& bk, const auto& in, const auto& out) {
                         backends::copy(bk, in[0], out[0]);
                         backends::copy(bk, in[2], out[1]);
                         backends::copy(bk, in[4], out[2]);
                         backends::sgd_step(bk, out[0], in[1], out[1], Tensor(), gs, {in[3], out[2]});
                       });
    }
  }
}

// Clipping device gradients computes the norm and the factor on the device (nothing is read back)
// and gives the CPU's norm and clipped gradients, for every norm type and gradient dtype.
TEST_F(CudaAmp, ClipGradNormOnTheDeviceMatchesTheCpu) {
  for (DType dt : float_types()) {
    for (double p : {2.0, 1.0, 3.0, nn::utils::kInfNorm}) {
      for (double max_norm : {1.0, 1e6}) {  // clipped, and left alone (the factor clamps to 1)
        SCOPED_TRACE(std::string(dtype_name(dt)) + " p=" + std::to_string(p) + " max_norm=" + std::to_string(max_norm));
        std::vector<Tensor> params[2];
        for (int d = 0; d < 2; ++d)
          for (int i = 0; i < 3; ++i) {
            const Device dev = d == 0 ? Device::cpu() : gpu_device();
            Tensor w = zeros({7 + 5000 * i}, TensorOptions(dt).device(dev)).set_requires_grad(true);
            w.set_grad(random_tensor(w.shape(), dt, 90 + i, -2.0, 2.0).to(dev));
            params[d].push_back(w);
          }
        const Tensor cpu_norm = nn::utils::clip_grad_norm_(params[0], max_norm, p);
        const Tensor gpu_norm = nn::utils::clip_grad_norm_(params[1], max_norm, p);
        EXPECT_EQ(gpu_norm.device(), gpu_device());
        EXPECT_EQ(gpu_norm.dtype(), cpu_norm.dtype());
        EXPECT_TRUE(all_close(gpu_norm.to(Device::cpu()), cpu_norm, tolerance_for(kFloat32)));
        for (int i = 0; i < 3; ++i)
          EXPECT_TRUE(all_close(params[1][i].grad().to(Device::cpu()), params[0][i].grad(), tolerance_for(dt)))
              << "gradient " << i;
      }
    }
  }
}

TEST_F(CudaAmp, DeviceMemoryGoesThroughTheCachingAllocator) {
  const Device d = gpu_device();
  memory::empty_cache(d);
  const memory::Stats before = memory::stats(d);
  {
    const Tensor t = empty({1 << 20}, TensorOptions(kFloat32).device(d));
    const memory::Stats during = memory::stats(d);
    EXPECT_GE(during.allocated_bytes - before.allocated_bytes, int64_t{4} << 20);
  }
  const memory::Stats after = memory::stats(d);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_GT(after.reserved_bytes, after.allocated_bytes) << "the freed block stays cached";
  const Tensor again = empty({1 << 20}, TensorOptions(kFloat32).device(d));
  EXPECT_GT(memory::stats(d).num_cache_hits, after.num_cache_hits);
}

// An MLP trained a few steps under autocast fp16 with the GradScaler and AdamW, on the GPU and on
// the CPU from the same initial weights and data: the losses agree to fp16 accuracy.
std::vector<double> train_mlp(Device device, DType amp_dtype, int steps) {
  manual_seed(7);
  nn::Sequential model(nn::Linear(32, 64), nn::ReLU(), nn::Linear(64, 64), nn::GELU(), nn::Linear(64, 1));
  model->to(device);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions().lr(1e-2));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024.0).enabled(amp_dtype == kFloat16));
  Generator gen(11);
  const Tensor x = randn({256, 32}, gen).to(device), y = randn({256, 1}, gen).to(device);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(device.type, amp_dtype);
      loss = nn::functional::mse_loss(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    scaler.step(opt);
    scaler.update();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

TEST_F(CudaAmp, AutocastTrainingStepsMatchTheCpu) {
  for (DType dt : {kFloat16, kBFloat16}) {
    const std::vector<double> cpu = train_mlp(Device::cpu(), dt, 20), gpu = train_mlp(gpu_device(), dt, 20);
    EXPECT_LT(gpu.back(), 0.7 * gpu.front()) << "the loss falls on the GPU";
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_NEAR(gpu[i], cpu[i], 0.03 * std::abs(cpu[i]) + 1e-3) << dtype_name(dt) << " step " << i;
  }
}

}  // namespace
}  // namespace mixtrain::testing
