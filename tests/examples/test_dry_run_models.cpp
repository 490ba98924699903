// memory::dry_run on the example trainers' models at a tiny size: the predicted peak of one
// training step as the trainers take it (forward, backward, clipping, AdamW) against the CPU
// caching allocator's measured peak allocated bytes of the same real step, fp32 and under
// autocast bf16 / fp16 (with a GradScaler). On a machine with a GPU the UNet also runs on CUDA
// against a CUDA-target dry run, whose convolutions ask cuDNN for their workspace.
#include <cstdio>
#include <functional>
#include <optional>

#include "mixtrain/memory/dry_run.h"
#include "support/testing.h"
#include "transformer/gpt_model.h"
#include "unet/unet_model.h"

namespace mt = mixtrain;
namespace mem = mixtrain::memory;
namespace ex = mixtrain::examples;
using mt::Tensor;

namespace {

struct Precision {
  const char* name;
  bool autocast;
  mt::DType dtype;
};
const Precision kPrecisions[] = {{"fp32", false, mt::kFloat32}, {"bf16", true, mt::kBFloat16}, {"fp16", true, mt::kFloat16}};

// A model under test: builds it (on the CPU), its batch on a device, and its loss.
struct ModelCase {
  const char* name;
  std::function<std::shared_ptr<mt::nn::Module>()> build;
  std::function<std::pair<Tensor, Tensor>(mt::Device)> batch;
  std::function<Tensor(mt::nn::Module&, const Tensor&, const Tensor&)> loss;
};

void step(mt::nn::Module& model, mt::optim::AdamW& opt, std::optional<mt::amp::GradScaler>& scaler, const ModelCase& c,
          const Tensor& x, const Tensor& y, const Precision& p, mt::DeviceType autocast_device) {
  opt.zero_grad();
  Tensor loss;
  {
    std::optional<mt::amp::AutocastGuard> autocast;
    if (p.autocast) autocast.emplace(autocast_device, p.dtype);
    loss = c.loss(model, x, y);
  }
  // As train::train (src/train/train_loop.cpp) does: unscale, clip, step.
  if (scaler) {
    scaler->scale(loss).backward();
    scaler->unscale_(opt);
  } else {
    loss.backward();
  }
  mt::nn::utils::clip_grad_norm_(model.parameters(), 1.0);
  if (scaler) {
    scaler->step(opt);
    scaler->update();
  } else {
    opt.step();
  }
}

std::optional<mt::amp::GradScaler> scaler_for(const Precision& p) {
  std::optional<mt::amp::GradScaler> s;
  if (p.dtype == mt::kFloat16) s.emplace();
  return s;
}

int64_t measured_peak(const ModelCase& c, const Precision& p, mt::Device device) {
  const int64_t before = mem::stats(device).allocated_bytes;
  int64_t peak = 0;
  {
    std::shared_ptr<mt::nn::Module> model = c.build();
    model->to(device);
    mt::optim::AdamW opt(model->parameters(), mt::optim::AdamWOptions(1e-3));
    std::optional<mt::amp::GradScaler> scaler = scaler_for(p);
    const auto [x, y] = c.batch(device);
    mem::reset_peak_stats(device);
    step(*model, opt, scaler, c, x, y, p, device.type);
    peak = mem::stats(device).peak_allocated_bytes - before;
  }
  return peak;
}

int64_t predicted_peak(const ModelCase& c, const Precision& p, mt::Device target) {
  std::shared_ptr<mt::nn::Module> model = c.build();
  model->to(mt::Device::meta());
  mt::optim::AdamW opt(model->parameters(), mt::optim::AdamWOptions(1e-3));
  std::optional<mt::amp::GradScaler> scaler = scaler_for(p);
  const auto batch = c.batch(mt::Device::meta());  // a pair, not bindings: the lambda captures them
  const auto& x = batch.first;
  const auto& y = batch.second;
  return mem::dry_run(target, [&] { step(*model, opt, scaler, c, x, y, p, target.type); }).peak_bytes();
}

void expect_prediction_within_one_percent(const ModelCase& c, mt::Device device = mt::Device::cpu()) {
  for (const Precision& p : kPrecisions) {
    SCOPED_TRACE(std::string(c.name) + " " + p.name + " on " + device.str());
    const int64_t real = measured_peak(c, p, device), predicted = predicted_peak(c, p, device);
    std::printf("%s step, %s, %s: predicted peak %ld bytes, measured %ld bytes (%+.3f%%)\n", c.name, p.name,
                device.str().c_str(), static_cast<long>(predicted), static_cast<long>(real),
                100.0 * static_cast<double>(predicted - real) / static_cast<double>(real));
    ASSERT_GT(real, 0);
    EXPECT_NEAR(static_cast<double>(predicted), static_cast<double>(real), 0.01 * static_cast<double>(real));
  }
}

}  // namespace

TEST(DryRunModels, TinyTransformerStepPeakIsPredicted) {
  ex::GptOptions o;
  o.vocab = 64;
  o.context = 16;
  o.width = 32;
  o.layers = 2;
  o.heads = 2;
  const ModelCase c{"transformer (vocab 64, context 16, width 32, 2 layers, batch 8)",
                    [o] {
                      mt::manual_seed(1);
                      return std::static_pointer_cast<mt::nn::Module>(std::make_shared<ex::GptImpl>(o));
                    },
                    [o](mt::Device d) {
                      const mt::TensorOptions ids = mt::TensorOptions(mt::kInt64).device(d);
                      if (d.is_meta()) return std::pair{mt::empty({8, o.context}, ids), mt::empty({8, o.context}, ids)};
                      return std::pair{mt::randint(0, o.vocab, {8, o.context}).to(d),
                                       mt::randint(0, o.vocab, {8, o.context}).to(d)};
                    },
                    [o](mt::nn::Module& m, const Tensor& x, const Tensor& y) {
                      const Tensor logits = m.forward(x);
                      return mt::nn::functional::cross_entropy(logits.reshape({-1, o.vocab}), y.reshape({-1}));
                    }};
  expect_prediction_within_one_percent(c);
}

namespace {

ModelCase tiny_unet() {
  ex::UNetOptions o;
  o.in_channels = 1;
  o.classes = 3;
  o.width = 4;
  o.levels = 3;
  return ModelCase{"UNet (width 4, 3 levels, 16x16, batch 2)",
                   [o] {
                     mt::manual_seed(1);
                     return std::static_pointer_cast<mt::nn::Module>(std::make_shared<ex::UNetImpl>(o));
                   },
                   [o](mt::Device d) {
                     if (d.is_meta())
                       return std::pair{mt::empty({2, 1, 16, 16}, mt::TensorOptions().device(d)),
                                        mt::empty({2, 16, 16}, mt::TensorOptions(mt::kInt64).device(d))};
                     return std::pair{mt::randn({2, 1, 16, 16}).to(d), mt::randint(0, o.classes, {2, 16, 16}).to(d)};
                   },
                   [](mt::nn::Module& m, const Tensor& x, const Tensor& y) {
                     return mt::nn::functional::cross_entropy(m.forward(x), y);
                   }};
}

}  // namespace

TEST(DryRunModels, TinyUnetStepPeakIsPredicted) { expect_prediction_within_one_percent(tiny_unet()); }

// cuDNN's convolution workspace is part of the CUDA step's peak; the dry run asks the CUDA
// backend for it (docs/MEMORY.md).
TEST(DryRunModels, TinyUnetStepPeakIsPredictedOnCuda) {
  if (!mt::cuda::is_available())
    GTEST_SKIP() << "no CUDA device: the CUDA-target prediction needs a GPU to compare with";
  expect_prediction_within_one_percent(tiny_unet(), mt::Device::cuda());
}
