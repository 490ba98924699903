// FP8 training (amp/fp8.h): which layers Fp8Scaling converts, what runs in FP8 under
// Fp8AutocastGuard and what in bf16, the per-scope cache of the weights' fp8 copies, the
// once-per-step update of delayed scaling (history, algorithm, margin, MAX reduction across ranks),
// the statistics, and the state dict's validation.
#include <limits>

#include <nlohmann/json.hpp>

#include "amp/amp_test_util.h"

namespace mixtrain::amp_test {
namespace {

using testing::bytes_of;
using testing::random_tensor;
using testing::to_doubles;

class Fp8Training : public AmpTest {};

// 32 -> 64 (ReLU) -> 48 -> 10: the last layer's 10 outputs are not a multiple of 16, so the default
// filter leaves it in bf16.
nn::Sequential make_model(uint64_t seed) {
  manual_seed(seed);
  return nn::Sequential(nn::Linear(32, 64), nn::ReLU(), nn::Linear(64, 48), nn::GELU(), nn::Linear(48, 10));
}

nn::LinearImpl& linear_at(nn::Sequential& m, size_t i) {
  return *std::dynamic_pointer_cast<nn::LinearImpl>(m->children()[i]);
}

TEST_F(Fp8Training, RecipeIsValidated) {
  expect_error([] { amp::Fp8Recipe().history_len(0).validate(); }, {"Fp8Recipe", "history_len", "0"});
  expect_error([] { amp::Fp8Recipe().margin(-1).validate(); }, {"Fp8Recipe", "margin", "-1"});
  expect_error([] { amp::Fp8Recipe().dtype(kFloat32).validate(); }, {"Fp8Recipe", "dtype", "float32"});
  EXPECT_EQ(amp::Fp8Recipe().history_rows(), 1024);
  EXPECT_EQ(amp::Fp8Recipe().scaling(amp::Fp8ScalingMode::Current).history_rows(), 1);
}

TEST_F(Fp8Training, ScalingGivesStateToTheFilteredLinearsAsBuffers) {
  nn::Sequential model = make_model(1);
  amp::Fp8Scaling fp8(model, amp::Fp8Recipe().history_len(8));
  EXPECT_EQ(fp8.layer_names(), (std::vector<std::string>{"0", "2"}));
  EXPECT_EQ(linear_at(model, 4).fp8_state(), nullptr);
  const auto sd = model->state_dict();
  for (const char* n : {"0.fp8_amax_history", "0.fp8_scale", "0.fp8_scale_inv", "2.fp8_scale"})
    EXPECT_TRUE(sd.count(n)) << n;
  EXPECT_EQ(sd.at("0.fp8_amax_history").shape(), (Shape{8, 3}));
  EXPECT_EQ(to_doubles(sd.at("2.fp8_scale")), (std::vector<double>{1, 1, 1}));
  // Buffers are not parameters: the optimizer never sees them.
  EXPECT_EQ(model->parameters().size(), 6u);
  // A filter of one's own; a second Fp8Scaling with another history length is an Error.
  nn::Sequential other = make_model(1);
  amp::Fp8Scaling only_last(other, amp::Fp8Recipe(), [](const std::string& name, const nn::LinearImpl&) {
    return name == "4";
  });
  EXPECT_EQ(only_last.layer_names(), (std::vector<std::string>{"4"}));
  expect_error([&] { amp::Fp8Scaling again(model, amp::Fp8Recipe().history_len(4)); }, {"enable_fp8", "8", "4"});
}

TEST_F(Fp8Training, UnderTheScopeLinearsRunInFp8AndTheRestInBf16) {
  nn::Sequential model = make_model(2);
  amp::Fp8Scaling fp8(model, amp::Fp8Recipe().history_len(4));
  const Tensor x = random_tensor({6, 32}, kFloat32, 3);
  nn::LinearImpl& l0 = linear_at(model, 0);
  Tensor y0, y_last, plain;
  {
    amp::Fp8AutocastGuard scope(DeviceType::CPU, amp::Fp8Recipe().history_len(4));
    EXPECT_TRUE(amp::is_fp8_autocast_enabled(DeviceType::CPU));
    EXPECT_TRUE(amp::is_autocast_enabled(DeviceType::CPU));
    EXPECT_EQ(amp::autocast_dtype(DeviceType::CPU), kBFloat16);
    y0 = l0.forward(x);
    y_last = linear_at(model, 4).forward(random_tensor({6, 48}, kFloat32, 4));
  }
  EXPECT_FALSE(amp::is_fp8_autocast_enabled(DeviceType::CPU));
  plain = l0.forward(x);
  EXPECT_EQ(plain.dtype(), kFloat32);  // outside the scope: the plain fp32 layer
  EXPECT_EQ(y0.dtype(), kBFloat16);
  EXPECT_EQ(y_last.dtype(), kBFloat16);  // no FP8 state: bf16 autocast
  // The FP8 path is fp8_linear with the layer's state (scales 1 before any update), bit for bit.
  Fp8LinearState st;
  st.scale = ones({3});
  st.scale_inv = ones({3});
  st.amax = zeros({3});
  st.saturated = zeros({3}, TensorOptions(kInt64));
  const Tensor direct = fp8_linear(x, l0.weight, l0.bias.to(kBFloat16), st, Fp8LinearConfig());
  EXPECT_EQ(bytes_of(y0), bytes_of(direct));
  // ... and its statistics went to row 0 of the layer's history.
  EXPECT_EQ(to_doubles(l0.fp8_state()->amax_history.select(0, 0)), to_doubles(st.amax));
  // enabled = false: neither FP8 nor autocast.
  {
    amp::Fp8AutocastGuard off(DeviceType::CPU, amp::Fp8Recipe().history_len(4), false);
    EXPECT_EQ(l0.forward(x).dtype(), kFloat32);
  }
  // A CUDA scope leaves CPU tensors alone.
  {
    amp::Fp8AutocastGuard cuda_scope(DeviceType::CUDA, amp::Fp8Recipe().history_len(4));
    EXPECT_EQ(l0.forward(x).dtype(), kFloat32);
  }
  // The recipe must keep the history the state was made with.
  expect_error(
      [&] {
        amp::Fp8AutocastGuard scope(DeviceType::CPU, amp::Fp8Recipe().history_len(16));
        l0.forward(x);
      },
      {"Fp8AutocastGuard", "4 history rows", "16"});
}

TEST_F(Fp8Training, WeightCopyIsCastOncePerScopeUntilTheWeightChanges) {
  nn::Sequential model = make_model(3);
  const amp::Fp8Recipe recipe = amp::Fp8Recipe().history_len(2);
  amp::Fp8Scaling fp8(model, recipe);
  nn::LinearImpl& l0 = linear_at(model, 0);
  // A scale that saturates many weights, so each cast of the weight adds to slot 1's count.
  NoGradGuard no_grad;
  l0.fp8_state()->scale.copy_(from_vector<float>({1.0f, 4000.0f, 1.0f}, {3}));
  l0.fp8_state()->scale_inv.copy_(from_vector<float>({1.0f, 1.0f / 4000.0f, 1.0f}, {3}));
  const Tensor x = random_tensor({4, 32}, kFloat32, 5);
  int64_t once = 0;
  {
    amp::Fp8AutocastGuard scope(DeviceType::CPU, recipe);
    l0.forward(x);
    once = to_doubles(l0.fp8_state()->saturated)[1];
    ASSERT_GT(once, 0);
    l0.forward(x);
    l0.forward(x * 2.0);
    EXPECT_EQ(to_doubles(l0.fp8_state()->saturated)[1], once);  // cached: not cast again
    l0.weight.mul_(1.0);  // an in-place write (an optimizer step) makes the copy stale
    l0.forward(x);
    EXPECT_EQ(to_doubles(l0.fp8_state()->saturated)[1], 2 * once);
  }
  {
    amp::Fp8AutocastGuard scope(DeviceType::CPU, recipe);  // a new scope casts afresh
    l0.forward(x);
    EXPECT_EQ(to_doubles(l0.fp8_state()->saturated)[1], 3 * once);
  }
}

// One training step of the model on fixed data under the recipe.
void train_step(nn::Sequential& model, optim::AdamW& opt, amp::Fp8Scaling& fp8, int i) {
  const Tensor x = random_tensor({16, 32}, kFloat32, 100 + static_cast<uint64_t>(i % 3), -3, 3);
  const Tensor y = random_tensor({16, 10}, kFloat32, 200 + static_cast<uint64_t>(i % 3));
  opt.zero_grad();
  Tensor loss;
  {
    amp::Fp8AutocastGuard scope(DeviceType::CPU, fp8.recipe());
    loss = nn::functional::mse_loss(model->forward(x), y);
  }
  loss.backward();
  opt.step();
  fp8.update();
}

TEST_F(Fp8Training, DelayedUpdateScalesFromTheHistoryAndRolls) {
  nn::Sequential model = make_model(4);
  const amp::Fp8Recipe recipe = amp::Fp8Recipe().history_len(3).margin(1);
  amp::Fp8Scaling fp8(model, recipe);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-3));
  nn::LinearImpl& l2 = linear_at(model, 2);
  std::vector<std::vector<double>> rows;  // each step's row 0, read before the update
  for (int i = 0; i < 4; ++i) {
    const Tensor x = random_tensor({16, 32}, kFloat32, 100 + static_cast<uint64_t>(i), -3, 3);
    opt.zero_grad();
    Tensor loss;
    {
      amp::Fp8AutocastGuard scope(DeviceType::CPU, recipe);
      loss = model->forward(x).sum();
    }
    loss.backward();
    opt.step();
    const std::vector<double> row = to_doubles(l2.fp8_state()->amax_history.select(0, 0));
    for (double a : row) EXPECT_GT(a, 0);  // input, weight and grad output all seen
    rows.push_back(row);
    const std::vector<double> used_scale = to_doubles(l2.fp8_state()->scale);
    fp8.update();
    // The scale is max over the last three steps' amaxes, then 2^-margin; the histories rolled.
    const std::vector<double> scale = to_doubles(l2.fp8_state()->scale);
    const std::vector<double> inv = to_doubles(l2.fp8_state()->scale_inv);
    for (int j = 0; j < 3; ++j) {
      double amax = 0;
      for (size_t k = rows.size() >= 3 ? rows.size() - 3 : 0; k < rows.size(); ++k) amax = std::max(amax, rows[k][j]);
      const float fmax = j == 2 ? 57344.0f : 448.0f;
      EXPECT_EQ(scale[j], (fmax / static_cast<float>(amax)) / 2.0f) << "step " << i << " slot " << j;
      EXPECT_EQ(inv[j], 1.0f / static_cast<float>(scale[j]));
    }
    EXPECT_EQ(to_doubles(l2.fp8_state()->amax_history.select(0, 0)), (std::vector<double>{0, 0, 0}));
    EXPECT_EQ(to_doubles(l2.fp8_state()->amax_history.select(0, 1)), rows.back());
    // The statistics are the step's: its amaxes and the scales it cast with.
    const amp::Fp8LayerStats st = fp8.stats()[1];
    EXPECT_EQ(st.name, "2");
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(st.amax[j], static_cast<float>(rows.back()[j]));
      EXPECT_EQ(st.scale[j], static_cast<float>(used_scale[j]));
    }
  }
  EXPECT_EQ(fp8.updates(), 4);
}

TEST_F(Fp8Training, MostRecentAlgorithmAndSaturationStatistics) {
  nn::Sequential model = make_model(5);
  const amp::Fp8Recipe recipe = amp::Fp8Recipe().history_len(4).amax_algorithm(amp::Fp8AmaxAlgorithm::MostRecent);
  amp::Fp8Scaling fp8(model, recipe);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-3));
  nn::LinearImpl& l0 = linear_at(model, 0);
  // Scale 1 on inputs up to 1000 (step 1): e4m3 saturates above 448, and the statistics say so.
  const Tensor big = random_tensor({16, 32}, kFloat32, 7, -1000, 1000);
  opt.zero_grad();
  {
    amp::Fp8AutocastGuard scope(DeviceType::CPU, recipe);
    model->forward(big).sum().backward();
  }
  opt.step();
  fp8.update();
  const amp::Fp8LayerStats s1 = fp8.stats()[0];
  int64_t over = 0;
  for (double v : to_doubles(big)) over += std::fabs(v) > 448;
  EXPECT_EQ(s1.saturated[0], over);
  EXPECT_GT(over, 0);
  EXPECT_EQ(to_doubles(l0.fp8_state()->saturated), (std::vector<double>{0, 0, 0}));  // reset for the next step
  // Step 2 on small inputs: most_recent forgets step 1's 1000.
  const Tensor small = random_tensor({16, 32}, kFloat32, 8, -2, 2);
  opt.zero_grad();
  {
    amp::Fp8AutocastGuard scope(DeviceType::CPU, recipe);
    model->forward(small).sum().backward();
  }
  opt.step();
  fp8.update();
  const amp::Fp8LayerStats s2 = fp8.stats()[0];
  EXPECT_EQ(s2.saturated[0], 0);
  EXPECT_EQ(to_doubles(l0.fp8_state()->scale)[0], 448.0f / s2.amax[0]);
}

TEST_F(Fp8Training, TheReduceHookSeesEveryLayersAmaxesOnce) {
  nn::Sequential model = make_model(6);
  amp::Fp8Scaling fp8(model, amp::Fp8Recipe().history_len(2));
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-3));
  int calls = 0;
  // Stands in for the MAX all-reduce of data parallelism: another rank saw amax 100 everywhere.
  fp8.set_amax_reduce_hook([&](Tensor& amaxes) {
    ++calls;
    EXPECT_EQ(amaxes.shape(), (Shape{2, 3}));
    amaxes.copy_(maximum(amaxes, full({2, 3}, 100.0)));
  });
  train_step(model, opt, fp8, 0);
  EXPECT_EQ(calls, 1);
  for (const amp::Fp8LayerStats& s : fp8.stats())
    for (int j = 0; j < 3; ++j) EXPECT_EQ(s.amax[j], 100.0f) << s.name;
  EXPECT_EQ(to_doubles(linear_at(model, 0).fp8_state()->scale)[0], 448.0f / 100.0f);
}

TEST_F(Fp8Training, CurrentScalingNeedsNoUpdateAndTrains) {
  nn::Sequential model = make_model(7);
  const amp::Fp8Recipe recipe = amp::Fp8Recipe().scaling(amp::Fp8ScalingMode::Current);
  amp::Fp8Scaling fp8(model, recipe);
  EXPECT_EQ(linear_at(model, 0).fp8_state()->amax_history.shape(), (Shape{1, 3}));
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-2));
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    const Tensor x = random_tensor({16, 32}, kFloat32, 300, -3, 3), y = random_tensor({16, 10}, kFloat32, 301);
    opt.zero_grad();
    Tensor loss;
    {
      amp::Fp8AutocastGuard scope(DeviceType::CPU, recipe);
      loss = nn::functional::mse_loss(model->forward(x), y);
    }
    loss.backward();
    opt.step();
    fp8.update();
    (i == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.5 * first);
  const amp::Fp8LayerStats s = fp8.stats()[0];
  for (int j = 0; j < 3; ++j) {
    const float fmax = j == 2 ? 57344.0f : 448.0f;  // HYBRID: the gradient in e5m2
    EXPECT_EQ(s.scale[j], fmax / s.amax[j]) << "slot " << j;
  }
}

TEST_F(Fp8Training, StateDictIsValidatedWhole) {
  nn::Sequential model = make_model(8);
  const amp::Fp8Recipe recipe = amp::Fp8Recipe().history_len(2);
  amp::Fp8Scaling fp8(model, recipe);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-3));
  train_step(model, opt, fp8, 0);
  const nlohmann::json state = fp8.state_dict();
  EXPECT_EQ(state["updates"], 1);
  EXPECT_EQ(state["recipe"]["history_len"], 2);
  EXPECT_EQ(state["recipe"]["format"], "hybrid");
  std::map<std::string, Tensor> tensors;
  for (const auto& [n, t] : model->state_dict()) tensors.emplace(n, t.clone());
  fp8.validate_state_dict(state, tensors);  // as saved: fine

  nlohmann::json bad = state;
  bad["recipe"]["margin"] = 2;
  expect_error([&] { fp8.validate_state_dict(bad, tensors); }, {"fp8.recipe.margin", "2", "0"});
  bad = state;
  bad["layers"] = {"0"};
  expect_error([&] { fp8.validate_state_dict(bad, tensors); }, {"fp8.layers", "[\"0\"]"});
  bad = state;
  bad["updates"] = -1;
  expect_error([&] { fp8.validate_state_dict(bad, tensors); }, {"updates"});
  auto with = [&](const std::string& name, Tensor value) {
    std::map<std::string, Tensor> t = tensors;
    t[name] = value;
    return t;
  };
  expect_error([&] { fp8.validate_state_dict(state, with("2.fp8_scale", from_vector<float>({1, 0, 1}, {3}))); },
               {"2.fp8_scale", "[1]", "finite and positive"});
  expect_error([&] { fp8.validate_state_dict(state, with("0.fp8_scale_inv", from_vector<float>({1, 1, 1}, {3}))); },
               {"0.fp8_scale_inv", "disagree"});
  Tensor nan_history = tensors.at("0.fp8_amax_history").clone();
  nan_history.fill_(std::nan(""));
  expect_error([&] { fp8.validate_state_dict(state, with("0.fp8_amax_history", nan_history)); },
               {"0.fp8_amax_history", "not NaN"});
  expect_error([&] { fp8.validate_state_dict(state, with("0.fp8_amax_history", zeros({3, 3}))); },
               {"0.fp8_amax_history", "[3, 3]", "[2, 3]"});
  // A fresh Fp8Scaling on the same model takes the document.
  amp::Fp8Scaling again(model, recipe);
  again.load_state_dict(state);
  EXPECT_EQ(again.updates(), 1);
}

// Edits that passed the checks before: a subnormal scale whose inverse is inf (the next loss
// NaN), a counter at INT64_MAX (wrapped by the next update, so the final save failed), an amax
// history of +inf. Each is refused naming the field, and nothing is loaded.
TEST_F(Fp8Training, StateWithAnOverflowingInverseCounterOrAmaxIsRefused) {
  nn::Sequential model = make_model(8);
  amp::Fp8Scaling fp8(model, amp::Fp8Recipe().history_len(2));
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-3));
  train_step(model, opt, fp8, 0);
  const nlohmann::json state = fp8.state_dict();
  std::map<std::string, Tensor> tensors;
  for (const auto& [n, t] : model->state_dict()) tensors.emplace(n, t.clone());
  auto with = [&](const std::string& name, Tensor value) {
    std::map<std::string, Tensor> t = tensors;
    t[name] = value;
    return t;
  };
  std::map<std::string, Tensor> tiny = with("0.fp8_scale", from_vector<float>({1e-40f, 1, 1}, {3}));
  tiny["0.fp8_scale_inv"] = from_vector<float>({std::numeric_limits<float>::infinity(), 1, 1}, {3});
  expect_error([&] { fp8.validate_state_dict(state, tiny); }, {"0.fp8_scale_inv", "[0]", "inf", "finite and positive"});
  nlohmann::json bad = state;
  bad["updates"] = std::numeric_limits<int64_t>::max();
  expect_error([&] { fp8.validate_state_dict(bad, tensors); }, {"fp8", "updates"});
  Tensor inf_history = tensors.at("0.fp8_amax_history").clone();
  inf_history.fill_(std::numeric_limits<double>::infinity());
  expect_error([&] { fp8.validate_state_dict(state, with("0.fp8_amax_history", inf_history)); },
               {"0.fp8_amax_history", "inf", "finite"});
  // load_state_dict runs the same checks first: the scales in the model stay as they were.
  const std::vector<float> before = tensors.at("0.fp8_scale").to_vector<float>();
  expect_error([&] { fp8.load_state_dict(bad); }, "updates");
  EXPECT_EQ(model->state_dict().at("0.fp8_scale").to_vector<float>(), before);
  EXPECT_EQ(fp8.updates(), 1);
}

}  // namespace
}  // namespace mixtrain::amp_test
