// Optimizer state_dict / load_state_dict: round trip (continuing after a load is bit-identical
// to not stopping), and every validation error leaves the optimizer untouched.
#include <cstring>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::bytes_of;
using mt::testing::expect_error;
using mt::testing::random_tensor;

namespace {

struct Rig {
  std::vector<Tensor> params;
  std::unique_ptr<mt::optim::Optimizer> opt;
};

Rig make_rig(uint64_t seed, bool master) {
  Rig s;
  const mt::DType dt = master ? mt::kFloat16 : mt::kFloat32;
  s.params = {random_tensor({5, 4}, dt, seed).set_requires_grad(true), random_tensor({4}, dt, seed + 1).set_requires_grad(true)};
  s.opt = std::make_unique<mt::optim::AdamW>(
      s.params, mt::optim::AdamWOptions(1e-2).amsgrad(true).master_weights(master));
  return s;
}

void train(Rig& s, int steps, uint64_t seed) {
  for (int k = 0; k < steps; ++k) {
    for (size_t i = 0; i < s.params.size(); ++i)
      s.params[i].set_grad(random_tensor(s.params[i].shape(), s.params[i].dtype(), seed + 17 * k + i));
    s.opt->step();
  }
}

}  // namespace

TEST(OptimizerState, RoundTripContinuesBitIdentically) {
  for (bool master : {false, true}) {
    SCOPED_TRACE(master ? "master weights" : "fp32");
    Rig a = make_rig(1, master);
    train(a, 3, 50);
    const nlohmann::json doc = a.opt->state_dict();
    EXPECT_EQ(doc["type"], "AdamW");
    EXPECT_EQ(doc["param_groups"][0]["params"], nlohmann::json::array({0, 1}));
    EXPECT_EQ(doc["state"]["0"]["step"], 3);
    const auto tensors = a.opt->state_tensors();
    EXPECT_EQ(tensors.size(), master ? 8u : 6u);

    Rig b = make_rig(99, master);  // different values everywhere
    {
      mt::NoGradGuard ng;
      for (size_t i = 0; i < a.params.size(); ++i) b.params[i].copy_(a.params[i]);
    }
    b.opt->load_state_dict(doc, tensors);
    EXPECT_EQ(b.opt->state_dict(), doc);
    train(a, 2, 900);
    train(b, 2, 900);
    for (size_t i = 0; i < a.params.size(); ++i) EXPECT_EQ(bytes_of(a.params[i]), bytes_of(b.params[i]));
    const auto ta = a.opt->state_tensors(), tb = b.opt->state_tensors();
    ASSERT_EQ(ta.size(), tb.size());
    for (size_t i = 0; i < ta.size(); ++i) {
      EXPECT_EQ(ta[i].first, tb[i].first);
      EXPECT_EQ(bytes_of(ta[i].second), bytes_of(tb[i].second)) << ta[i].first;
    }
  }
}

TEST(OptimizerState, BadDocumentsAreRejectedWholeNamingTheField) {
  Rig a = make_rig(1, true);
  train(a, 2, 5);
  const nlohmann::json good = a.opt->state_dict();
  const auto tensors = a.opt->state_tensors();

  Rig b = make_rig(7, true);
  train(b, 1, 77);
  const nlohmann::json before = b.opt->state_dict();
  std::vector<std::vector<uint8_t>> before_bytes;
  for (const auto& [n, t] : b.opt->state_tensors()) before_bytes.push_back(bytes_of(t));

  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json d = good;
    edit(d);
    return d;
  };
  expect_error([&] { b.opt->load_state_dict(with([](auto& d) { d["type"] = "SGD"; }), tensors); }, "\"SGD\"");
  expect_error([&] { b.opt->load_state_dict(with([](auto& d) { d["param_groups"][0]["lr"] = "fast"; }), tensors); },
               "param_groups[0].lr must be a number");
  expect_error([&] { b.opt->load_state_dict(with([](auto& d) { d["param_groups"][0]["lr"] = -1.0; }), tensors); },
               "invalid lr");
  expect_error([&] { b.opt->load_state_dict(with([](auto& d) { d["param_groups"][0].erase("eps"); }), tensors); },
               "missing field \"eps\"");
  expect_error([&] { b.opt->load_state_dict(with([](auto& d) { d["param_groups"][0]["momentum"] = 0.9; }), tensors); },
               "unknown field \"momentum\"");
  expect_error(
      [&] { b.opt->load_state_dict(with([](auto& d) { d["param_groups"][0]["master_weights"] = false; }), tensors); },
      "master_weights");
  expect_error([&] { b.opt->load_state_dict(with([](auto& d) { d["param_groups"][0]["params"] = {0}; }), tensors); },
               "params");
  expect_error([&] { b.opt->load_state_dict(with([](auto& d) { d["state"]["7"] = d["state"]["0"]; }), tensors); },
               "parameter index");
  expect_error([&] { b.opt->load_state_dict(with([](auto& d) { d["state"]["0"]["step"] = -3; }), tensors); },
               "step");
  auto missing = tensors;
  missing.pop_back();
  expect_error([&] { b.opt->load_state_dict(good, missing); }, "missing from the tensors");
  auto extra = tensors;
  extra.emplace_back("state.0.bogus", mt::zeros({5, 4}));
  expect_error([&] { b.opt->load_state_dict(good, extra); }, "state.0.bogus");
  auto wrong_shape = tensors;
  wrong_shape[1].second = mt::zeros({4, 5});
  expect_error([&] { b.opt->load_state_dict(good, wrong_shape); }, wrong_shape[1].first);
  auto wrong_dtype = tensors;
  wrong_dtype[0].second = wrong_dtype[0].second.to(mt::kFloat16);
  expect_error([&] { b.opt->load_state_dict(good, wrong_dtype); }, "dtype float32");

  EXPECT_EQ(b.opt->state_dict(), before);
  size_t i = 0;
  for (const auto& [n, t] : b.opt->state_tensors()) EXPECT_EQ(bytes_of(t), before_bytes[i++]) << n;
}
