// The dry run of an FP8 training step: the predicted peak matches the real CPU step's (scaled_mm's
// scratch modelled by the meta backend), and the trace names the FP8 memory: the scaling state
// (scales, inverse scales, amax histories, counts; persistent) and the fp8 copies the GEMMs read
// (the weights' and activations' in forward, the gradients' in backward).
#include <cstdio>

#include "mixtrain/memory/caching_allocator.h"
#include "mixtrain/memory/dry_run.h"
#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace mem = mixtrain::memory;
using mt::Tensor;

namespace {

constexpr int64_t kBatch = 256, kIn = 96, kHidden = 128, kClasses = 10, kHistory = 16;

mt::nn::Sequential make_mlp() {
  mt::manual_seed(3);
  // The last layer (10 outputs) stays in bf16: the default filter wants multiples of 16.
  return mt::nn::Sequential(mt::nn::Linear(kIn, kHidden), mt::nn::ReLU(), mt::nn::Linear(kHidden, kHidden),
                            mt::nn::ReLU(), mt::nn::Linear(kHidden, kClasses));
}

const mt::amp::Fp8Recipe kRecipe = mt::amp::Fp8Recipe().history_len(kHistory);

void train_step(mt::nn::Sequential& model, mt::optim::Adam& opt, mt::amp::Fp8Scaling& fp8, const Tensor& x,
                const Tensor& y) {
  opt.zero_grad();
  Tensor loss;
  {
    mt::amp::Fp8AutocastGuard scope(mt::DeviceType::CPU, kRecipe);
    loss = mt::nn::functional::cross_entropy(model->forward(x), y);
  }
  loss.backward();
  mt::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
  opt.step();
  fp8.update();
}

int64_t rounded(int64_t bytes) { return static_cast<int64_t>(mem::CachingAllocator::round_size(static_cast<size_t>(bytes))); }

}  // namespace

TEST(DryRunFp8, PeakMatchesTheRealStepAndTheTraceNamesFp8Memory) {
  // The real step on the CPU (its second: the first makes the optimizer state).
  const int64_t before = mem::stats(mt::Device::cpu()).allocated_bytes;
  int64_t real = 0;
  {
    mt::nn::Sequential model = make_mlp();
    mt::amp::Fp8Scaling fp8(model, kRecipe);
    mt::optim::Adam opt(model->parameters(), mt::optim::AdamOptions(1e-3));
    const Tensor x = mt::randn({kBatch, kIn}), y = mt::randint(0, kClasses, {kBatch});
    train_step(model, opt, fp8, x, y);
    mem::reset_peak_stats(mt::Device::cpu());
    train_step(model, opt, fp8, x, y);
    real = mem::stats(mt::Device::cpu()).peak_allocated_bytes - before;
  }
  // The same on meta, dry-run.
  mt::nn::Sequential model = make_mlp();
  model->to(mt::Device::meta());
  mt::amp::Fp8Scaling fp8(model, kRecipe);
  mt::optim::Adam opt(model->parameters(), mt::optim::AdamOptions(1e-3));
  const Tensor x = mt::empty({kBatch, kIn}, mt::TensorOptions().device(mt::Device::meta()));
  const Tensor y = mt::empty({kBatch}, mt::TensorOptions(mt::kInt64).device(mt::Device::meta()));
  train_step(model, opt, fp8, x, y);
  const mem::MemoryTrace trace = mem::dry_run(mt::Device::cpu(), [&] { train_step(model, opt, fp8, x, y); });
  const int64_t predicted = trace.peak_bytes();
  std::printf("FP8 MLP step: predicted peak %ld bytes, measured %ld (%.3f%%)\n", static_cast<long>(predicted),
              static_cast<long>(real), 100.0 * static_cast<double>(predicted - real) / static_cast<double>(real));
  EXPECT_NEAR(static_cast<double>(predicted), static_cast<double>(real), 0.01 * static_cast<double>(real));

  // The scaling state, per FP8 layer: the history, scales, inverse scales, counts, and the last
  // step's statistics (three [3] tensors), all alive before the step.
  int64_t state_before = 0;
  for (const mem::MemoryEvent& e : trace.events)
    if (e.before_step && e.role == mem::Role::Fp8State) state_before += static_cast<int64_t>(e.bytes);
  const int64_t per_layer = rounded(kHistory * 3 * 4) + 2 * rounded(12) + rounded(24) + 2 * rounded(12) + rounded(24);
  EXPECT_EQ(state_before, 2 * per_layer);
  // The fp8 copies: each FP8 layer's input and weight in forward, its output's gradient in backward.
  const int64_t copies = rounded(kBatch * kIn) + rounded(kHidden * kIn) + rounded(kBatch * kHidden) +  // layer 0
                         rounded(kBatch * kHidden) + rounded(kHidden * kHidden) + rounded(kBatch * kHidden);
  EXPECT_EQ(trace.allocated_by_role()[static_cast<int>(mem::Role::Fp8Copy)], copies);
  EXPECT_STREQ(mem::role_name(mem::Role::Fp8Copy), "fp8_copy");
  EXPECT_STREQ(mem::role_name(mem::Role::Fp8State), "fp8_state");
}
