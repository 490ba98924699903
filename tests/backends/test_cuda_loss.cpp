// The CUDA NLL loss against the CPU backend: ignore_index, label smoothing, bad targets.
#include "backends/cuda_test_util.h"

namespace mixtrain::testing {
namespace {

class CudaLoss : public CudaTest {};

TEST_F(CudaLoss, NllLossWithIgnoreIndexAndLabelSmoothing) {
  for (DType dt : float_types()) {
    for (const View3& v : {View3{256, 10, 1}, View3{4, 11, 300}}) {
      for (double smoothing : {0.0, 0.1}) {
        const Tensor logp = log_softmax(random_tensor({v.outer, v.n, v.inner}, kFloat32, 24, -3, 3), 1).to(dt);
        std::vector<int64_t> t = randint(0, v.n, {v.outer * v.inner}, TensorOptions(kInt64)).to_vector<int64_t>();
        for (size_t i = 0; i < t.size(); i += 9) t[i] = -100;  // some ignored
        const Tensor target = from_vector(t, {v.outer, v.inner});
        backends::NllLossArgs args;
        args.label_smoothing = smoothing;
        const Tensor grad = full({}, 0.75, TensorOptions(dt));
        compare_backends(std::string("nll ") + dtype_name(dt), {logp, target, grad},
                         {{{}, dt, "loss", tolerance_for(dt)}, {{}, kInt64, "count", exact()},
                          {logp.shape(), dt, "grad", tolerance_for(dt)}},
                         [v, args](auto& b, const auto& in, const auto& out) {
                           backends::nll_loss(b, in[0], in[1], v.outer, v.n, v.inner, args, out[0], out[1]);
                           backends::nll_loss_backward(b, in[1], v.outer, v.n, v.inner, args, in[2], out[1], out[2]);
                         });
      }
    }
  }
}

TEST_F(CudaLoss, OutOfRangeTargetIsAnErrorNamingIt) {
  const Tensor logits = randn({4, 5}, TensorOptions().device(gpu_device()));
  const Tensor target = from_vector(std::vector<int64_t>{0, 3, 7, 1}, {4}, TensorOptions(kInt64).device(gpu_device()));
  expect_error([&] { nn::functional::cross_entropy(logits, target); },
               "target 7 at position 2 is out of range for 5 classes");
}

}  // namespace
}  // namespace mixtrain::testing
