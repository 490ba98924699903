// GradScaler behaviour: scale() in fp32, unscale_ values and the inf/NaN check, skipping,
// several optimizers and losses, gradient accumulation, enabled=false, state_dict, half
// gradients, master-weight unscaling, gradient statistics.
#include <cmath>
#include <cstring>
#include <limits>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::bytes_of;
using mt::testing::expect_error;
using mt::testing::random_tensor;
using mt::testing::to_doubles;

namespace {

}  // namespace

TEST(GradScaler, ScaleMultipliesInFloat32) {
  mt::amp::GradScaler scaler;  // 65536
  Tensor w = mt::full({1}, 1.0, mt::kFloat16).set_requires_grad(true);
  Tensor loss = (w * 2.0).sum();
  ASSERT_EQ(loss.dtype(), mt::kFloat16);
  Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.dtype(), mt::kFloat32);
  EXPECT_EQ(scaled.item<float>(), 131072.0f);  // above fp16's 65504: fp32 is needed here
  mt::amp::GradScaler small(mt::amp::GradScalerOptions().init_scale(1024));
  small.scale(loss).backward();
  EXPECT_EQ(w.grad().dtype(), mt::kFloat16);
  EXPECT_EQ(w.grad().to_vector<float>()[0], 2048.0f);
  mt::amp::GradScaler off(mt::amp::GradScalerOptions().enabled(false));
  EXPECT_TRUE(off.scale(loss).is_same(loss));
  EXPECT_EQ(scaler.scale(std::vector<Tensor>{loss, loss}).size(), 2u);
  EXPECT_THROW(scaler.scale(mt::zeros({1}, mt::kInt64)), mt::Error);
}

TEST(GradScaler, UnscaleMultipliesByTheFloat64Reciprocal) {
  // A scale that is not a power of two: inv = float(1 / double(scale)).
  const double s = 3000.0;
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().init_scale(s));
  Tensor a = mt::zeros({70000}).set_requires_grad(true);  // several chunks, threads
  Tensor b = mt::zeros({5, 3}, mt::kFloat64).set_requires_grad(true);
  mt::optim::SGD sgd({a, b}, mt::optim::SGDOptions(0.1));
  a.set_grad(random_tensor(a.shape(), mt::kFloat32, 1, -1e4, 1e4));
  b.set_grad(random_tensor(b.shape(), mt::kFloat64, 2, -1e4, 1e4));
  const std::vector<double> ga = to_doubles(a.grad()), gb = to_doubles(b.grad());
  scaler.unscale_(sgd);
  const float inv = static_cast<float>(1.0 / s);
  const std::vector<float> got = a.grad().to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(ga[i]) * inv) << i;
  const std::vector<double> gotb = b.grad().to_vector<double>();
  for (size_t i = 0; i < gotb.size(); ++i) ASSERT_EQ(gotb[i], gb[i] * static_cast<double>(inv)) << i;
  EXPECT_TRUE(scaler.step(sgd));
}

TEST(GradScaler, OverflowSkipsTheStepAndLeavesEverythingBitIdentical) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {inf, -inf, std::nanf("")}) {
    mt::amp::GradScaler scaler;
    Tensor w = random_tensor({300, 200}, mt::kFloat32, 3).set_requires_grad(true);
    mt::optim::Adam adam({w});
    w.set_grad(random_tensor(w.shape(), mt::kFloat32, 4));
    scaler.step(adam);  // one clean step so the optimizer has state
    scaler.update();
    const auto w0 = bytes_of(w);
    std::vector<std::vector<uint8_t>> s0;
    for (const auto& [n, t] : adam.state_tensors()) s0.push_back(bytes_of(t));
    const nlohmann::json sd0 = adam.state_dict();

    Tensor g = random_tensor(w.shape(), mt::kFloat32, 5);
    {
      mt::NoGradGuard ng;
      g.view({-1}).narrow(0, 59999, 1).fill_(bad);  // the very last element
    }
    w.set_grad(g);
    EXPECT_FALSE(scaler.step(adam));
    EXPECT_EQ(bytes_of(w), w0);
    size_t i = 0;
    for (const auto& [n, t] : adam.state_tensors()) EXPECT_EQ(bytes_of(t), s0[i++]) << n;
    EXPECT_EQ(adam.state_dict()["state"], sd0["state"]);
    EXPECT_TRUE(adam.last_step_skipped());
    EXPECT_EQ(scaler.skipped_steps(), 1);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 32768.0);
  }
}

TEST(GradScaler, SeveralOptimizersAndLossesShareOneScaler) {
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().init_scale(1024));
  Tensor w1 = mt::ones({3}).set_requires_grad(true);
  Tensor w2 = mt::ones({3}).set_requires_grad(true);
  mt::optim::SGD o1({w1}, mt::optim::SGDOptions(0.5));
  mt::optim::SGD o2({w2}, mt::optim::SGDOptions(0.5));
  Tensor l1 = (w1 * w1).sum();
  Tensor l2 = (w2 * 1e36).sum();  // * 1024 overflows fp32 in backward
  scaler.scale(l1).backward();
  scaler.scale(l2).backward();
  EXPECT_EQ(w1.grad().to_vector<float>()[0], 2048.0f);
  scaler.unscale_(o1);
  EXPECT_EQ(w1.grad().to_vector<float>()[0], 2.0f);
  EXPECT_TRUE(scaler.step(o1));   // each optimizer decides on its own grads
  EXPECT_FALSE(scaler.step(o2));
  EXPECT_EQ(w1.to_vector<float>()[0], 0.0f);
  EXPECT_EQ(w2.to_vector<float>()[0], 1.0f);
  scaler.update();  // one backoff for the iteration
  EXPECT_EQ(scaler.get_scale(), 512.0);
}

TEST(GradScaler, GradientAccumulationUnscalesOnceAtTheEnd) {
  // With a power-of-two scale, scaling, accumulating and unscaling is exact in fp32.
  Tensor x = random_tensor({4, 6}, mt::kFloat32, 7);
  Tensor w = random_tensor({6, 2}, mt::kFloat32, 8).set_requires_grad(true);
  Tensor ref_w = w.detach().clone().set_requires_grad(true);
  mt::optim::SGD opt({w}, mt::optim::SGDOptions(0.1));
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().init_scale(256));
  for (int micro = 0; micro < 3; ++micro) {
    Tensor xm = x * static_cast<double>(micro + 1);
    scaler.scale(mt::matmul(xm, w).sum() / 3.0).backward();
    (mt::matmul(xm, ref_w).sum() / 3.0).backward();
  }
  scaler.unscale_(opt);
  EXPECT_EQ(bytes_of(w.grad()), bytes_of(ref_w.grad()));
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
}

TEST(GradScaler, DisabledIsAPassThrough) {
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().enabled(false));
  Tensor w = mt::ones({2}).set_requires_grad(true);
  mt::optim::SGD sgd({w}, mt::optim::SGDOptions(1.0));
  w.set_grad(mt::full({2}, 0.5));
  scaler.unscale_(sgd);
  EXPECT_EQ(w.grad().to_vector<float>()[0], 0.5f);
  EXPECT_TRUE(scaler.step(sgd));
  EXPECT_TRUE(scaler.step(sgd));  // no state machine either
  scaler.update();
  scaler.update();
  EXPECT_EQ(w.to_vector<float>()[0], 0.0f);
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_TRUE(scaler.state_dict().empty());
  scaler.load_state_dict(nlohmann::json::object());  // ignored when disabled
}

TEST(GradScaler, StateDictHasPyTorchsFiveKeysAndLoadsPyTorchsDocument) {
  mt::amp::GradScaler a(mt::amp::GradScalerOptions().init_scale(4096).growth_interval(3));
  Tensor w = mt::ones({2}).set_requires_grad(true);
  mt::optim::SGD sgd({w}, mt::optim::SGDOptions(0.1));
  for (int i = 0; i < 2; ++i) {
    w.set_grad(mt::ones({2}));
    a.step(sgd);
    a.update();
  }
  const nlohmann::json sd = a.state_dict();
  EXPECT_EQ(sd, nlohmann::json::parse(R"({"scale": 4096.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                                          "growth_interval": 3, "_growth_tracker": 2})"));
  mt::amp::GradScaler b;
  b.load_state_dict(sd);
  EXPECT_EQ(b.state_dict(), sd);
  EXPECT_EQ(b.get_growth_interval(), 3);  // saved hyper-parameters win, as in PyTorch
  // What torch.amp.GradScaler.state_dict() gives, through json.dumps.
  b.load_state_dict(nlohmann::json::parse(
      R"({"scale": 32768.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, "_growth_tracker": 17})"));
  EXPECT_EQ(b.get_scale(), 32768.0);
  EXPECT_EQ(b.get_growth_tracker(), 17);
  mt::amp::GradScaler h(mt::amp::GradScalerOptions().hysteresis(2));
  EXPECT_TRUE(h.state_dict().contains("_hysteresis_tracker"));
}

TEST(GradScaler, LoadStateDictValidatesEveryFieldAndChangesNothingOnError) {
  const nlohmann::json good = nlohmann::json::parse(
      R"({"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 100, "_growth_tracker": 3})");
  struct Case {
    std::string key;
    nlohmann::json value;  // null: remove the key
    std::string message;
  };
  const std::vector<Case> cases = {
      {"scale", nullptr, "missing field \"scale\""},
      {"scale", "big", "scale must be a number"},
      {"scale", true, "scale must be a number"},
      {"scale", -1.0, "scale must be > 0"},
      {"scale", 0.0, "scale must be > 0"},
      {"scale", 1e300, "float32 range"},
      {"growth_factor", 1.0, "growth_factor"},
      {"growth_factor", nullptr, "missing field \"growth_factor\""},
      {"backoff_factor", 1.5, "backoff_factor"},
      {"backoff_factor", "0.5", "backoff_factor must be a number"},
      {"growth_interval", 0, "growth_interval must be in [1"},
      {"growth_interval", 2000.5, "growth_interval must be an integer"},
      {"_growth_tracker", -1, "_growth_tracker must be in [0"},
      {"_growth_tracker", nullptr, "missing field \"_growth_tracker\""},
      {"extra_key", 1, "unknown field \"extra_key\""},
  };
  mt::amp::GradScaler s(mt::amp::GradScalerOptions().init_scale(8).growth_interval(5));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key + " = " + c.value.dump());
    nlohmann::json d = good;
    if (c.value.is_null()) d.erase(c.key);
    else d[c.key] = c.value;
    expect_error([&] { s.load_state_dict(d); }, c.message);
    EXPECT_EQ(s.get_scale(), 8.0);
    EXPECT_EQ(s.get_growth_interval(), 5);
  }
  expect_error([&] { s.load_state_dict(nlohmann::json::object()); }, "The source state dict is empty");
  expect_error([&] { s.load_state_dict(nlohmann::json::array()); }, "expected a JSON object");
  mt::amp::GradScaler clamped(mt::amp::GradScalerOptions().init_scale(256).max_scale(512));
  expect_error([&] { clamped.load_state_dict(good); }, "max_scale");
}

TEST(GradScaler, HalfGradientsWithoutMasterWeightsAreRejected) {
  mt::amp::GradScaler scaler;
  Tensor w = mt::ones({4}, mt::kFloat16).set_requires_grad(true);
  mt::optim::Adam adam({w});
  w.set_grad(mt::ones({4}, mt::kFloat16));
  expect_error([&] { scaler.unscale_(adam); }, "master_weights");
  expect_error([&] { scaler.step(adam); }, "AdamOptions().master_weights(true)");
  // Nothing was unscaled: the grad is as it was and the state machine is still READY.
  EXPECT_EQ(w.grad().to_vector<float>()[0], 1.0f);
  Tensor b = mt::ones({4}, mt::kBFloat16).set_requires_grad(true);
  mt::optim::SGD sgd({b});
  b.set_grad(mt::ones({4}, mt::kBFloat16));
  expect_error([&] { scaler.step(sgd); }, "bfloat16");
}

TEST(GradScaler, MasterWeightsReadHalfGradsAndWriteFloat32MasterGrads) {
  for (mt::DType dt : {mt::kFloat16, mt::kBFloat16}) {
    mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().init_scale(1 << 20));
    Tensor w = random_tensor({50000}, dt, 9).set_requires_grad(true);
    mt::optim::SGD sgd({w}, mt::optim::SGDOptions(1e-3).master_weights(true));
    // Scaled half gradients, some of which would be subnormal or zero in fp16 once unscaled.
    Tensor g = random_tensor({50000}, dt, 10, -30.0, 30.0);
    w.set_grad(g);
    const auto g_bytes = bytes_of(g);
    scaler.unscale_(sgd);
    EXPECT_EQ(bytes_of(w.grad()), g_bytes);  // the half grad is not touched
    const Tensor master = sgd.master_params()[0];
    ASSERT_TRUE(master.grad().defined());
    ASSERT_EQ(master.grad().dtype(), mt::kFloat32);
    const std::vector<double> gd = to_doubles(g);
    const std::vector<float> mg = master.grad().to_vector<float>();
    const float inv = static_cast<float>(1.0 / (1 << 20));
    for (size_t i = 0; i < mg.size(); ++i) ASSERT_EQ(mg[i], static_cast<float>(gd[i]) * inv) << i;
    // clip_grad_norm_ on the master params sees the unscaled fp32 gradients.
    double ref = 0;
    for (float v : mg) ref += static_cast<double>(v) * v;
    EXPECT_NEAR(mt::nn::utils::clip_grad_norm_(sgd.master_params(), 1e9).item<double>(), std::sqrt(ref), 1e-6 * std::sqrt(ref));
    const std::vector<double> w0 = to_doubles(sgd.master_params()[0]);
    EXPECT_TRUE(scaler.step(sgd));
    // The step used the fp32 master grads: w = w0 - lr * g / scale.
    const std::vector<double> w1 = to_doubles(sgd.master_params()[0]);
    for (size_t i = 0; i < 100; ++i)
      EXPECT_FLOAT_EQ(static_cast<float>(w1[i]), static_cast<float>(w0[i]) + static_cast<float>(-1e-3) * mg[i]) << i;
    scaler.update();
  }
}

TEST(GradScaler, GradientHealthStatistics) {
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().init_scale(2).track_stats(true));
  Tensor a = mt::zeros({8}).set_requires_grad(true);
  Tensor b = mt::zeros({4}, mt::kFloat16).set_requires_grad(true);
  mt::optim::Adam adam({a, b}, mt::optim::AdamOptions().master_weights(true));
  // 12 scaled elements: 4 zeros, 3 below 2^-14 (1e-5, -3e-5 in fp32; 2^-20 in fp16), max |g| 300.
  a.set_grad(mt::from_vector(std::vector<float>{0, 1e-5f, -3e-5f, 300, -2, 0, 7e-5f, 1}, {8}));
  b.set_grad(mt::from_vector(std::vector<float>{0, std::ldexp(1.0f, -20), -100, 0}, {4}, mt::kFloat16));
  EXPECT_TRUE(scaler.step(adam));
  scaler.update();
  const mt::amp::GradScalerStats& s = scaler.last_stats();
  EXPECT_EQ(s.iteration, 1);
  EXPECT_FALSE(s.found_inf);
  EXPECT_EQ(s.num_elements, 12);
  EXPECT_DOUBLE_EQ(s.max_abs_scaled_grad, 300.0);
  EXPECT_DOUBLE_EQ(s.zero_fraction, 4.0 / 12);
  EXPECT_DOUBLE_EQ(s.fp16_subnormal_fraction, 3.0 / 12);
  EXPECT_EQ(s.scale, 2.0);
  // An overflow: counted, and max |g| is over the finite elements.
  a.set_grad(mt::from_vector(std::vector<float>{std::numeric_limits<float>::infinity(), 5, 0, 0, 0, 0, 0, 0}, {8}));
  b.set_grad(mt::zeros({4}, mt::kFloat16));
  EXPECT_FALSE(scaler.step(adam));
  scaler.update();
  EXPECT_TRUE(scaler.last_stats().found_inf);
  EXPECT_EQ(scaler.last_stats().skipped_steps, 1);
  EXPECT_DOUBLE_EQ(scaler.last_stats().max_abs_scaled_grad, 5.0);
  EXPECT_EQ(scaler.last_stats().next_scale, 1.0);
}

TEST(GradScaler, StepDecidesOnTheDeviceAndReadsBackOnlyWhenAsked) {
  // One device holds every gradient, so the flag goes to the optimizer's kernels: the outcome
  // carries the device flag and converts to bool only when read.
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().init_scale(8.0));
  Tensor w = random_tensor({64}, mt::kFloat32, 3).set_requires_grad(true);
  mt::optim::SGD sgd({w}, mt::optim::SGDOptions(0.1).momentum(0.9));
  for (int i = 0; i < 3; ++i) {
    Tensor g = random_tensor(w.shape(), mt::kFloat32, 20 + static_cast<uint64_t>(i));
    if (i == 1) {
      mt::NoGradGuard ng;
      g.narrow(0, 17, 1).fill_(std::numeric_limits<float>::infinity());
    }
    w.set_grad(g);
    const auto before = to_doubles(w);
    const mt::amp::StepOutcome outcome = scaler.step(sgd);
    ASSERT_TRUE(outcome.found_inf().defined()) << "decided on the host";
    EXPECT_EQ(outcome.taken(), i != 1);
    EXPECT_EQ(to_doubles(w) == before, i == 1);
    scaler.update();
  }
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(sgd.steps_taken(), 2);
  EXPECT_EQ(sgd.steps_skipped(), 1);
  EXPECT_EQ(sgd.state_dict()["state"]["0"]["step"], 2);
  EXPECT_EQ(scaler.get_scale(), 4.0);
}
