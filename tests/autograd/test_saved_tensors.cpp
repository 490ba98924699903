// In-place changes of tensors saved for backward: backward raises PyTorch's "modified by an
// inplace operation" Error instead of computing a wrong gradient. The walk covers every op of
// op_list.h: each tensor an op could read in backward (every input, every output) is changed in
// place after the forward pass; backward must then either raise that Error or give exactly the
// gradients of an unchanged run (the op did not read it). Ops known to save a tensor must raise.
// The elementwise ops come from the shared sample registry (tests/ops/op_samples.h), which says
// from their lists what their backward reads; any other new op in op_list.h fails the walk until
// it gets a case here.
#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "mixtrain/ops/op_list.h"
#include "ops/op_samples.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using mt::testing::expect_error;
using mt::testing::random_tensor;

namespace {

constexpr const char* kInplaceError = "modified by an inplace operation";

mt::Tensor leaf(const mt::Shape& shape, uint64_t seed, double lo = 0.5, double hi = 1.5) {
  return random_tensor(shape, mt::kFloat64, seed, lo, hi).set_requires_grad(true);
}
mt::Tensor constant(const mt::Shape& shape, uint64_t seed, double lo = 0.5, double hi = 1.5) {
  return random_tensor(shape, mt::kFloat64, seed, lo, hi);
}

// One op's forward: builds fresh inputs (the same values on every call) and the outputs.
struct Forward {
  std::vector<mt::Tensor> inputs;
  std::vector<mt::Tensor> outputs;  // outputs[0] is differentiated; the others are the op's extra outputs
};

struct Case {
  std::function<Forward()> run;
  // Tensors that backward reads, so changing them must raise: "in0", "in1", "out0", "out1", ...
  std::set<std::string> must_detect;
};

// A case from the shared registry: its inputs as fp64 leaves, what its backward reads.
Case from_sample(const mt::testing::OpSample& s) {
  return {[s] {
            std::vector<mt::Tensor> in = s.inputs(mt::kFloat64, true);
            return Forward{in, {s.run(in)}};
          },
          s.reads};
}

std::map<std::string, Case> cases() {
  using T = mt::Tensor;
  std::map<std::string, Case> c;
  c["to"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {x.to(mt::kFloat32)}}; }, {}};
  c["contiguous"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {x.transpose(0, 1).contiguous()}}; }, {}};
  c["clone"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {x.clone()}}; }, {}};
  c["reshape"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {x.reshape({4, 3})}}; }, {}};
  c["transpose"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {x.transpose(0, 1)}}; }, {}};
  c["permute"] = {[] { T x = leaf({2, 3, 4}, 1); return Forward{{x}, {x.permute({2, 0, 1})}}; }, {}};
  c["slice"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {mt::slice(x, 1, 1, 3)}}; }, {}};
  c["expand"] = {[] { T x = leaf({1, 4}, 1); return Forward{{x}, {x.expand({3, 4})}}; }, {}};
  c["matmul"] = {[] { T x = leaf({3, 4}, 1), w = leaf({5, 4}, 2); return Forward{{x, w}, {mt::matmul(x, w.t())}}; },
                 {"in0", "in1"}};
  c["bmm"] = {[] { T a = leaf({2, 3, 4}, 1), b = leaf({2, 4, 5}, 2); return Forward{{a, b}, {mt::bmm(a, b)}}; },
              {"in0", "in1"}};
  c["linear"] = {[] {
                   T x = leaf({3, 4}, 1), w = leaf({5, 4}, 2), b = leaf({5}, 3);
                   return Forward{{x, w, b}, {mt::linear(x, w, b)}};
                 },
                 {"in0", "in1"}};
  c["where"] = {[] {
                  T cond = mt::gt(constant({3, 4}, 4, -1, 1), mt::zeros({}, mt::TensorOptions(mt::kFloat64)));
                  T a = leaf({3, 4}, 1), b = leaf({3, 4}, 2);
                  return Forward{{cond, a, b}, {mt::where(cond, a, b)}};
                },
                {"in0"}};
  c["sum"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {mt::sum(x, {1})}}; }, {}};
  c["mean"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {mt::mean(x, {1})}}; }, {}};
  c["max"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {mt::max(x, 1)}}; }, {}};
  c["min"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {mt::min(x, 1)}}; }, {}};
  c["softmax"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {mt::softmax(x, 1)}}; }, {"out0"}};
  c["log_softmax"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {mt::log_softmax(x, 1)}}; }, {"out0"}};
  c["mse_loss"] = {[] { T x = leaf({3, 4}, 1), y = constant({3, 4}, 2); return Forward{{x, y}, {F::mse_loss(x, y)}}; },
                   {}};
  auto target = [] { return mt::from_vector(std::vector<int64_t>{0, 3, 1}, {3}); };
  c["nll_loss"] = {[=] {
                     T lp = leaf({3, 4}, 1, -2, -0.1), t = target();
                     return Forward{{lp, t}, {F::nll_loss(lp, t)}};
                   },
                   {"in1"}};
  c["cross_entropy"] = {[=] {
                          T x = leaf({3, 4}, 1), t = target();
                          return Forward{{x, t}, {F::cross_entropy(x, t)}};
                        },
                        {"in1"}};
  c["binary_cross_entropy_with_logits"] = {[] {
                                             T x = leaf({3, 4}, 1, -1, 1), y = constant({3, 4}, 2, 0, 1);
                                             return Forward{{x, y}, {F::binary_cross_entropy_with_logits(x, y)}};
                                           },
                                           {}};
  c["binary_cross_entropy"] = {[] {
                                 T p = leaf({3, 4}, 1, 0.2, 0.8), y = constant({3, 4}, 2, 0, 1);
                                 return Forward{{p, y}, {F::binary_cross_entropy(p, y)}};
                               },
                               {}};
  c["dot"] = {[] { T a = leaf({5}, 1), b = leaf({5}, 2); return Forward{{a, b}, {mt::dot(a, b)}}; }, {"in0", "in1"}};
  c["addcmul"] = {[] {
                    T s = leaf({3, 4}, 1), a = leaf({3, 4}, 2), b = leaf({3, 4}, 3);
                    return Forward{{s, a, b}, {mt::addcmul(s, a, b, 0.5)}};
                  },
                  {"in1", "in2"}};
  c["dropout"] = {[] {
                    mt::manual_seed(5);
                    T x = leaf({3, 4}, 1);
                    return Forward{{x}, {F::dropout(x, 0.5, true)}};
                  },
                  {}};
  c["conv2d"] = {[] {
                   T x = leaf({1, 2, 5, 5}, 1), w = leaf({3, 2, 3, 3}, 2), b = leaf({3}, 3);
                   return Forward{{x, w, b}, {F::conv2d(x, w, b)}};
                 },
                 {"in0", "in1"}};
  c["conv_transpose2d"] = {[] {
                             T x = leaf({1, 2, 4, 4}, 1), w = leaf({2, 3, 3, 3}, 2), b = leaf({3}, 3);
                             return Forward{{x, w, b}, {F::conv_transpose2d(x, w, b)}};
                           },
                           {"in0", "in1"}};
  c["scaled_dot_product_attention"] = {[] {
                                         T q = leaf({1, 2, 3, 4}, 1), k = leaf({1, 2, 3, 4}, 2), v = leaf({1, 2, 3, 4}, 3);
                                         return Forward{{q, k, v}, {F::scaled_dot_product_attention(q, k, v)}};
                                       },
                                       {"in0", "in1", "in2", "out0"}};  // the fused path saves all four
  c["max_pool2d"] = {[] {
                       T x = leaf({1, 2, 4, 4}, 1);
                       auto [out, idx] = F::max_pool2d_with_indices(x, 2);
                       return Forward{{x}, {out, idx}};
                     },
                     {"out1"}};
  c["upsample_nearest2d"] = {[] { T x = leaf({1, 2, 3, 3}, 1); return Forward{{x}, {F::upsample_nearest2d(x, {6, 6})}}; },
                             {}};
  c["upsample_bilinear2d"] = {[] {
                                T x = leaf({1, 2, 3, 3}, 1);
                                return Forward{{x}, {F::upsample_bilinear2d(x, {5, 5}, false)}};
                              },
                              {}};
  c["batch_norm"] = {[] {
                       T x = leaf({4, 3, 2, 2}, 1), w = leaf({3}, 2), b = leaf({3}, 3);
                       T rm = mt::zeros({3}, mt::TensorOptions(mt::kFloat64)), rv = mt::ones({3}, mt::TensorOptions(mt::kFloat64));
                       return Forward{{x, w, b, rm, rv}, {F::batch_norm(x, rm, rv, w, b, true)}};
                     },
                     {"in0", "in1"}};
  c["group_norm"] = {[] {
                       T x = leaf({2, 4, 3}, 1), w = leaf({4}, 2), b = leaf({4}, 3);
                       return Forward{{x, w, b}, {F::group_norm(x, 2, w, b)}};
                     },
                     {"in0", "in1"}};
  c["layer_norm"] = {[] {
                       T x = leaf({3, 4}, 1), w = leaf({4}, 2), b = leaf({4}, 3);
                       return Forward{{x, w, b}, {F::layer_norm(x, {4}, w, b)}};
                     },
                     {"in0", "in1"}};
  c["embedding"] = {[] {
                      T idx = mt::from_vector(std::vector<int64_t>{0, 2, 2, 4}, {4}), w = leaf({5, 3}, 1);
                      return Forward{{idx, w}, {F::embedding(idx, w)}};
                    },
                    {"in0"}};
  c["cat"] = {[] { T a = leaf({2, 4}, 1), b = leaf({3, 4}, 2); return Forward{{a, b}, {mt::cat({a, b})}}; }, {}};
  c["stack"] = {[] { T a = leaf({3, 4}, 1), b = leaf({3, 4}, 2); return Forward{{a, b}, {mt::stack({a, b})}}; }, {}};
  c["split"] = {[] {
                  T x = leaf({4, 3}, 1);
                  auto parts = mt::split(x, 2);
                  return Forward{{x}, {parts.at(1), parts.at(0)}};
                },
                {}};
  c["masked_fill"] = {[] {
                        T mask = mt::gt(constant({3, 4}, 4, -1, 1), mt::zeros({}, mt::TensorOptions(mt::kFloat64)));
                        T x = leaf({3, 4}, 1);
                        return Forward{{x, mask}, {mt::masked_fill(x, mask, -2.0)}};
                      },
                      {"in1"}};
  c["clamp"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {mt::clamp(x, 0.7, 1.2)}}; }, {"in0"}};
  c["topk"] = {[] {
                 T x = leaf({3, 5}, 1);
                 auto [values, indices] = mt::topk(x, 2, 1);
                 return Forward{{x}, {values, indices}};
               },
               {"out1"}};
  c["norm"] = {[] { T x = leaf({3, 4}, 1); return Forward{{x}, {mt::norm(x, 2, {1})}}; }, {"in0", "out0"}};
  return c;
}

// Ops with no gradient: nothing to save.
const std::set<std::string> kNotDifferentiable = {"compare", "argmax", "all", "any", "scaled_mm"};

// Changes t's values in place (so a backward that read them would differ), outside autograd.
void change_in_place(mt::Tensor t) {
  mt::NoGradGuard no_grad;
  if (mt::is_floating(t.dtype())) {
    t.mul_(-1.5);
  } else if (t.dtype() == mt::kBool) {
    t.copy_(mt::eq(t, mt::zeros({}, mt::TensorOptions(mt::kBool))));
  } else {
    t.copy_(mt::zeros(t.shape(), t.options()));  // indices and targets: all 0, still valid
  }
}

// The loss the test differentiates: fixed weights, so every output element matters and the
// product saves only the (unchanging) weights.
mt::Tensor loss_of(const mt::Tensor& out) {
  mt::Tensor w = random_tensor(out.shape(), out.dtype(), 77, 0.5, 1.5);
  return mt::sum(mt::mul(out, w));
}

std::vector<std::vector<double>> leaf_grads(const Forward& f) {
  std::vector<std::vector<double>> g;
  for (const mt::Tensor& t : f.inputs)
    g.push_back(t.requires_grad() && t.grad().defined() ? mt::testing::to_doubles(t.grad()) : std::vector<double>{});
  return g;
}

// One case of op `name`: each tensor changed in place in turn.
void check_case(const std::string& name, const Case& c) {
  Forward ref = c.run();
  loss_of(ref.outputs[0]).backward();
  const auto expected = leaf_grads(ref);

  std::vector<std::string> targets;
  for (size_t k = 0; k < ref.inputs.size(); ++k) targets.push_back("in" + std::to_string(k));
  for (size_t k = 0; k < ref.outputs.size(); ++k) targets.push_back("out" + std::to_string(k));
  for (const std::string& target : c.must_detect)
    ASSERT_NE(std::find(targets.begin(), targets.end(), target), targets.end()) << name << ": no tensor " << target;

  for (const std::string& target : targets) {
    SCOPED_TRACE(name + ", " + target + " changed in place after forward");
    Forward f = c.run();
    mt::Tensor loss = loss_of(f.outputs[0]);
    const bool is_input = target[0] == 'i';
    const size_t k = static_cast<size_t>(std::stoi(target.substr(is_input ? 2 : 3)));
    change_in_place(is_input ? f.inputs[k] : f.outputs[k]);
    std::string error;
    try {
      loss.backward();
    } catch (const mt::Error& e) {
      error = e.what();
    }
    if (c.must_detect.count(target)) {
      EXPECT_NE(error.find(kInplaceError), std::string::npos) << "expected the in-place error, got: '" << error << "'";
    } else if (!error.empty()) {
      // A composite op may read a tensor through an inner op: refusing is safe, not silent.
      EXPECT_NE(error.find(kInplaceError), std::string::npos) << error;
    } else {
      EXPECT_EQ(leaf_grads(f), expected) << "a wrong gradient, silently";
    }
  }
}

}  // namespace

TEST(SavedTensors, EveryOpEitherDetectsAnInPlaceChangeOrDoesNotReadTheTensor) {
  const auto all = cases();
  for (int i = 0; i < mt::ops::kNumOps; ++i) {
    const std::string name = mt::ops::op_name(static_cast<mt::ops::OpId>(i));
    if (kNotDifferentiable.count(name)) continue;
    std::vector<Case> todo;
    if (auto it = all.find(name); it != all.end()) todo.push_back(it->second);
    for (const mt::testing::OpSample& s : mt::testing::samples_of(name)) todo.push_back(from_sample(s));
    ASSERT_FALSE(todo.empty()) << "op " << name << " has no case here: add one (its forward, and the tensors its "
                               << "backward reads)";
    for (const Case& c : todo) check_case(name, c);
  }
}

TEST(SavedTensors, OptimizerStepBetweenForwardAndBackwardIsAnError) {
  // The example: out = matmul(x, W.t()), an optimizer step on W, then backward.
  mt::Tensor x = leaf({2, 3}, 1), W = leaf({4, 3}, 2);
  mt::matmul(x, W.t()).sum().backward();  // W has a gradient, so the step changes it
  mt::optim::SGD opt({W}, mt::optim::SGDOptions(0.1));
  mt::Tensor out = mt::matmul(x, W.t());
  opt.step();
  expect_error([&] { out.sum().backward(); },
               {"MmBackward", kInplaceError, "input 1", "[3, 4]", "is at version", "expected version"});
}

TEST(SavedTensors, InPlaceChangeOfASavedOutputUnderNoGradIsAnError) {
  // The second example: y = exp(w); {NoGradGuard g; y.mul_(0);} gave a zero gradient.
  mt::Tensor w = leaf({3}, 1);
  mt::Tensor y = mt::exp(w);
  {
    mt::NoGradGuard g;
    y.mul_(0.0);
  }
  expect_error([&] { y.sum().backward(); }, {"ExpBackward0", kInplaceError, "output 0", "[3]"});
}

TEST(SavedTensors, AChangeThroughAViewIsSeen) {
  mt::Tensor x = leaf({2, 3}, 1);
  mt::Tensor y = mt::relu(x);
  {
    mt::NoGradGuard g;
    x.reshape({6}).narrow(0, 1, 2).fill_(-1.0);  // shares x's memory
  }
  expect_error([&] { y.sum().backward(); }, kInplaceError);
}

TEST(SavedTensors, LegitimatePatternsStillWork) {
  mt::Tensor x = leaf({2, 3}, 1), W = leaf({4, 3}, 2);
  mt::optim::SGD opt({W}, mt::optim::SGDOptions(0.1));
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    mt::Tensor out = mt::matmul(x, W.t());
    out.sum().backward();  // backward before the step
    opt.step();
  }
  // In place on a tensor nothing saved: add saves neither input.
  mt::Tensor a = leaf({3}, 3), b = leaf({3}, 4);
  mt::Tensor s = mt::add(a, b);
  {
    mt::NoGradGuard g;
    b.mul_(2.0);
  }
  s.sum().backward();
  EXPECT_EQ(mt::testing::to_doubles(a.grad()), (std::vector<double>{1, 1, 1}));
  // A change before the forward pass is not a change after saving.
  mt::Tensor c = leaf({3}, 5);
  {
    mt::NoGradGuard g;
    c.mul_(2.0);
  }
  mt::exp(c).sum().backward();
  EXPECT_TRUE(c.grad().defined());
}

TEST(SavedTensors, ScalerUnscaleAndUpdateBumpVersions) {
  // GradScaler writes gradients and its scale in place through kernels: the versions must move.
  mt::Tensor w = leaf({4}, 1);
  mt::optim::SGD opt({w}, mt::optim::SGDOptions(0.1));
  mt::amp::GradScaler scaler;
  scaler.scale(mt::sum(w)).backward();
  const uint64_t grad_before = w.grad().version();
  scaler.unscale_(opt);
  EXPECT_GT(w.grad().version(), grad_before);
  const uint64_t w_before = w.version();
  scaler.step(opt);
  EXPECT_GT(w.version(), w_before);
  // A loss scaled before update() and differentiated after it would use the new scale: refused.
  mt::Tensor scaled = scaler.scale(mt::sum(w));
  scaler.update();
  expect_error([&] { scaled.backward(); }, kInplaceError);
}
