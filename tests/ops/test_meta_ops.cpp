// The meta device: every op of op_list.h runs on meta tensors with the outputs (shape, strides,
// dtype), autocast casts and gradients of the same call on the CPU; values cannot be read, meta
// and real tensors do not mix, and printing shows no values. The elementwise ops come from the
// shared sample registry (ops/op_samples.h); any other new op in op_list.h fails the walk until
// it gets a case here.
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "mixtrain/ops/op_list.h"
#include "ops/op_samples.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using mt::Tensor;
using mt::testing::expect_error;
using mt::testing::random_tensor;

namespace {

using Inputs = std::vector<Tensor>;
struct Case {
  std::function<Inputs()> inputs;  // on the CPU; leaves require grad where floating
  std::function<std::vector<Tensor>(const Inputs&)> run;
};

Tensor leaf(const mt::Shape& s, uint64_t seed, double lo = 0.5, double hi = 1.5) {
  return random_tensor(s, mt::kFloat32, seed, lo, hi).set_requires_grad(true);
}
Tensor ids(std::vector<int64_t> v) { const auto n = static_cast<int64_t>(v.size()); return mt::from_vector(v, {n}); }

std::map<std::string, Case> cases() {
  std::map<std::string, Case> c;
  auto one = [](mt::Shape s) { return [s] { return Inputs{leaf(s, 1)}; }; };
  auto two = [](mt::Shape a, mt::Shape b) { return [a, b] { return Inputs{leaf(a, 1), leaf(b, 2)}; }; };
  using V = std::vector<Tensor>;
  c["to"] = {one({3, 4}), [](const Inputs& i) { return V{i[0].to(mt::kFloat16)}; }};
  c["contiguous"] = {one({3, 4}), [](const Inputs& i) { return V{i[0].t().contiguous()}; }};
  c["clone"] = {one({3, 4}), [](const Inputs& i) { return V{i[0].clone()}; }};
  c["reshape"] = {one({3, 4}), [](const Inputs& i) { return V{i[0].t().reshape({2, 6})}; }};
  c["transpose"] = {one({3, 4}), [](const Inputs& i) { return V{i[0].transpose(0, 1)}; }};
  c["permute"] = {one({2, 3, 4}), [](const Inputs& i) { return V{i[0].permute({2, 0, 1})}; }};
  c["slice"] = {one({3, 4}), [](const Inputs& i) { return V{mt::slice(i[0], 1, 1, 3)}; }};
  c["expand"] = {one({1, 4}), [](const Inputs& i) { return V{i[0].expand({3, 4})}; }};
  c["matmul"] = {two({3, 4}, {4, 5}), [](const Inputs& i) { return V{mt::matmul(i[0], i[1])}; }};
  c["bmm"] = {two({2, 3, 4}, {2, 4, 5}), [](const Inputs& i) { return V{mt::bmm(i[0], i[1])}; }};
  c["linear"] = {[] { return Inputs{leaf({3, 4}, 1), leaf({5, 4}, 2), leaf({5}, 3)}; },
                 [](const Inputs& i) { return V{mt::linear(i[0], i[1], i[2])}; }};
  c["where"] = {[] { return Inputs{mt::gt(random_tensor({3, 4}, mt::kFloat32, 4), mt::zeros({})), leaf({3, 4}, 1), leaf({4}, 2)}; },
                [](const Inputs& i) { return V{mt::where(i[0], i[1], i[2])}; }};
  c["compare"] = {two({3, 4}, {3, 4}), [](const Inputs& i) { return V{mt::lt(i[0], i[1])}; }};
  c["sum"] = {one({3, 4}), [](const Inputs& i) { return V{mt::sum(i[0], {1}), mt::sum(i[0])}; }};
  c["mean"] = {one({3, 4}), [](const Inputs& i) { return V{mt::mean(i[0], {0}, true)}; }};
  c["max"] = {one({3, 4}), [](const Inputs& i) { return V{mt::max(i[0], 1)}; }};
  c["min"] = {one({3, 4}), [](const Inputs& i) { return V{mt::min(i[0], 1)}; }};
  c["argmax"] = {one({3, 4}), [](const Inputs& i) { return V{i[0].argmax(1)}; }};
  c["softmax"] = {one({3, 4}), [](const Inputs& i) { return V{mt::softmax(i[0], 1)}; }};
  c["log_softmax"] = {one({3, 4}), [](const Inputs& i) { return V{mt::log_softmax(i[0], 1)}; }};
  c["mse_loss"] = {two({3, 4}, {3, 4}), [](const Inputs& i) { return V{F::mse_loss(i[0], i[1])}; }};
  c["nll_loss"] = {[] { return Inputs{leaf({3, 4}, 1, -2, -0.1), ids({0, 3, 1})}; },
                   [](const Inputs& i) { return V{F::nll_loss(i[0], i[1])}; }};
  c["cross_entropy"] = {[] { return Inputs{leaf({3, 4}, 1), ids({0, 3, 1})}; },
                        [](const Inputs& i) { return V{F::cross_entropy(i[0], i[1])}; }};
  c["binary_cross_entropy_with_logits"] = {two({3, 4}, {3, 4}), [](const Inputs& i) {
                                             return V{F::binary_cross_entropy_with_logits(i[0], i[1].detach())};
                                           }};
  c["binary_cross_entropy"] = {[] { return Inputs{leaf({3, 4}, 1, 0.2, 0.8), random_tensor({3, 4}, mt::kFloat32, 2, 0, 1)}; },
                               [](const Inputs& i) { return V{F::binary_cross_entropy(i[0], i[1])}; }};
  c["dot"] = {two({5}, {5}), [](const Inputs& i) { return V{mt::dot(i[0], i[1])}; }};
  c["addcmul"] = {[] { return Inputs{leaf({3, 4}, 1), leaf({3, 4}, 2), leaf({4}, 3)}; },
                  [](const Inputs& i) { return V{mt::addcmul(i[0], i[1], i[2], 0.5)}; }};
  c["dropout"] = {one({3, 4}), [](const Inputs& i) { return V{F::dropout(i[0], 0.5, true)}; }};
  c["conv2d"] = {[] { return Inputs{leaf({1, 2, 5, 5}, 1), leaf({3, 2, 3, 3}, 2), leaf({3}, 3)}; },
                 [](const Inputs& i) { return V{F::conv2d(i[0], i[1], i[2])}; }};
  c["conv_transpose2d"] = {[] { return Inputs{leaf({1, 2, 4, 4}, 1), leaf({2, 3, 3, 3}, 2), leaf({3}, 3)}; },
                           [](const Inputs& i) { return V{F::conv_transpose2d(i[0], i[1], i[2])}; }};
  c["scaled_dot_product_attention"] = {[] { return Inputs{leaf({1, 2, 3, 4}, 1), leaf({1, 2, 3, 4}, 2), leaf({1, 2, 3, 4}, 3)}; },
                                       [](const Inputs& i) { return V{F::scaled_dot_product_attention(i[0], i[1], i[2])}; }};
  c["max_pool2d"] = {one({1, 2, 4, 4}), [](const Inputs& i) {
                       auto [out, idx] = F::max_pool2d_with_indices(i[0], 2);
                       return V{out, idx};
                     }};
  c["upsample_nearest2d"] = {one({1, 2, 3, 3}), [](const Inputs& i) { return V{F::upsample_nearest2d(i[0], {6, 6})}; }};
  c["upsample_bilinear2d"] = {one({1, 2, 3, 3}),
                              [](const Inputs& i) { return V{F::upsample_bilinear2d(i[0], {5, 5}, false)}; }};
  c["batch_norm"] = {[] { return Inputs{leaf({4, 3, 2, 2}, 1), leaf({3}, 2), leaf({3}, 3), mt::zeros({3}), mt::ones({3})}; },
                     [](const Inputs& i) { return V{F::batch_norm(i[0], i[3], i[4], i[1], i[2], true)}; }};
  c["group_norm"] = {[] { return Inputs{leaf({2, 4, 3}, 1), leaf({4}, 2), leaf({4}, 3)}; },
                     [](const Inputs& i) { return V{F::group_norm(i[0], 2, i[1], i[2])}; }};
  c["layer_norm"] = {[] { return Inputs{leaf({3, 4}, 1), leaf({4}, 2), leaf({4}, 3)}; },
                     [](const Inputs& i) { return V{F::layer_norm(i[0], {4}, i[1], i[2])}; }};
  c["embedding"] = {[] { return Inputs{ids({0, 2, 2, 4}), leaf({5, 3}, 1)}; },
                    [](const Inputs& i) { return V{F::embedding(i[0], i[1])}; }};
  c["cat"] = {two({2, 4}, {3, 4}), [](const Inputs& i) { return V{mt::cat({i[0], i[1]})}; }};
  c["stack"] = {two({3, 4}, {3, 4}), [](const Inputs& i) { return V{mt::stack({i[0], i[1]})}; }};
  c["split"] = {one({4, 3}), [](const Inputs& i) { return mt::split(i[0], 2); }};
  c["masked_fill"] = {[] { return Inputs{leaf({3, 4}, 1), mt::gt(random_tensor({4}, mt::kFloat32, 4), mt::zeros({}))}; },
                      [](const Inputs& i) { return V{mt::masked_fill(i[0], i[1], -1.5)}; }};
  c["clamp"] = {one({3, 4}), [](const Inputs& i) { return V{mt::clamp(i[0], 0.7, 1.2)}; }};
  // FP8 operands (no grad: scaled_mm is not differentiable; fp8_linear has the layer's backward).
  c["scaled_mm"] = {[] {
                      const Tensor s = mt::ones({1});
                      return Inputs{mt::to_float8(random_tensor({16, 32}, mt::kFloat32, 1, -2, 2), mt::kFloat8E4M3FN),
                                    mt::to_float8(random_tensor({32, 16}, mt::kFloat32, 2, -2, 2), mt::kFloat8E4M3FN), s,
                                    s * 0.5};
                    },
                    [](const Inputs& i) { return V{mt::scaled_mm(i[0], i[1], i[2], i[3])}; }};
  c["all"] = {one({3, 4}), [](const Inputs& i) { return V{mt::all(i[0], {1}), mt::all(i[0])}; }};
  c["any"] = {one({3, 4}), [](const Inputs& i) { return V{mt::any(i[0], {0}, true), mt::any(i[0])}; }};
  c["topk"] = {one({3, 5}), [](const Inputs& i) {
                 auto [values, indices] = mt::topk(i[0], 2, 0);
                 return V{values, indices};
               }};
  c["norm"] = {one({3, 4}), [](const Inputs& i) { return V{mt::norm(i[0], 2, {1}), mt::norm(i[0], INFINITY)}; }};
  return c;
}

// The cases of op `name`: its own here and the shared registry's, whose inputs are fp32 leaves.
std::vector<Case> cases_of(const std::map<std::string, Case>& own, const std::string& name) {
  std::vector<Case> found;
  if (auto it = own.find(name); it != own.end()) found.push_back(it->second);
  for (const mt::testing::OpSample& s : mt::testing::samples_of(name))
    found.push_back({[s] { return s.inputs(mt::kFloat32, true); }, [s](const Inputs& i) { return std::vector<Tensor>{s.run(i)}; }});
  return found;
}

Inputs to_meta(const Inputs& in) {
  Inputs out;
  for (const Tensor& t : in) {
    Tensor m = t.detach().to(mt::Device::meta());
    if (t.requires_grad()) m.set_requires_grad(true);
    out.push_back(m);
  }
  return out;
}

struct OpRun {
  std::vector<Tensor> outputs;
  std::vector<Tensor> grads;  // one per input, undefined where none
};

// Runs the op, then backward from the sum of its first floating output (when it has history).
OpRun run_case(const Case& c, const Inputs& in, std::optional<mt::DeviceType> autocast_on) {
  OpRun r;
  std::optional<mt::amp::AutocastGuard> guard;
  if (autocast_on) guard.emplace(*autocast_on, mt::kBFloat16);
  r.outputs = c.run(in);
  guard.reset();
  const Tensor& out = r.outputs.front();
  if (out.requires_grad()) mt::sum(out.to(mt::kFloat32)).backward();
  for (const Tensor& t : in) r.grads.push_back(t.requires_grad() ? t.grad() : Tensor());
  return r;
}

void expect_same_meta(const Tensor& cpu, const Tensor& meta, const std::string& what) {
  ASSERT_EQ(cpu.defined(), meta.defined()) << what;
  if (!cpu.defined()) return;
  EXPECT_TRUE(meta.device().is_meta()) << what;
  EXPECT_EQ(meta.shape(), cpu.shape()) << what;
  EXPECT_EQ(meta.strides(), cpu.strides()) << what;
  EXPECT_EQ(meta.dtype(), cpu.dtype()) << what;
  EXPECT_EQ(meta.requires_grad(), cpu.requires_grad()) << what;
  EXPECT_EQ(meta.grad_fn() != nullptr, cpu.grad_fn() != nullptr) << what;
  if (cpu.grad_fn() && meta.grad_fn()) EXPECT_STREQ(meta.grad_fn()->name(), cpu.grad_fn()->name()) << what;
}

}  // namespace

TEST(MetaOps, EveryOpGivesTheCpuOutputsAndGradientsWithAndWithoutAutocast) {
  const std::map<std::string, Case> all = cases();
  for (int k = 0; k < mt::ops::kNumOps; ++k) {
    const std::string name = mt::ops::op_name(static_cast<mt::ops::OpId>(k));
    const std::vector<Case> todo = cases_of(all, name);
    ASSERT_FALSE(todo.empty()) << "op '" << name << "' has no meta case: add one";
    for (const Case& c : todo) {
      for (bool autocast : {false, true}) {
        SCOPED_TRACE(name + (autocast ? " under autocast bf16" : ""));
        const Inputs cpu_in = c.inputs();
        const Inputs meta_in = to_meta(cpu_in);
        OpRun cpu, meta;
        const std::string cpu_error = mt::testing::error_of([&] {
          cpu = run_case(c, cpu_in, autocast ? std::optional(mt::DeviceType::CPU) : std::nullopt);
        });
        const std::string meta_error = mt::testing::error_of([&] {
          meta = run_case(c, meta_in, autocast ? std::optional(mt::DeviceType::Meta) : std::nullopt);
        });
        // The same checks: a call the CPU refuses (a banned op under autocast) is refused on meta
        // with the same message, naming meta where the CPU's names cpu.
        std::string expected_error = cpu_error;
        for (size_t at = 0; (at = expected_error.find(" cpu", at)) != std::string::npos; at += 5)
          expected_error.replace(at, 4, " meta");
        EXPECT_EQ(meta_error, expected_error);
        if (cpu_error != mt::testing::kNoError) continue;
        ASSERT_EQ(meta.outputs.size(), cpu.outputs.size());
        for (size_t o = 0; o < cpu.outputs.size(); ++o)
          expect_same_meta(cpu.outputs[o], meta.outputs[o], "output " + std::to_string(o));
        for (size_t g = 0; g < cpu.grads.size(); ++g) expect_same_meta(cpu.grads[g], meta.grads[g], "grad " + std::to_string(g));
      }
    }
  }
}

// grad_fn names follow one rule (docs/FROM_LIBTORCH.md): the op's name in CamelCase and
// "Backward0", as PyTorch's MulBackward0. A composite shows the node of the op that ran last.
TEST(MetaOps, GradFnNamesAreTheOpNameInCamelCaseAndBackward0) {
  auto camel = [](const std::string& op) {
    std::string out;
    bool upper = true;
    for (char c : op) {
      if (c == '_') upper = true;
      else out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c, upper = false;
    }
    return out + "Backward0";
  };
  EXPECT_EQ(camel("log_softmax"), "LogSoftmaxBackward0");
  const std::map<std::string, std::string> composites = {
      {"contiguous", "CloneBackward0"},     {"reshape", "ViewBackward0"},      {"matmul", "MmBackward0"},
      {"mse_loss", "MeanBackward0"},     {"cross_entropy", "NllLossBackward0"},
      {"binary_cross_entropy_with_logits", "MeanBackward0"}, {"binary_cross_entropy", "MeanBackward0"},
      {"dot", "ViewBackward0"},             {"addcmul", "AddBackward0"},       {"stack", "CatBackward0"},
      {"split", "SliceBackward0"}};
  const std::map<std::string, Case> all = cases();
  for (int k = 0; k < mt::ops::kNumOps; ++k) {
    const std::string name = mt::ops::op_name(static_cast<mt::ops::OpId>(k));
    EXPECT_EQ(mt::ops::backward_name(static_cast<mt::ops::OpId>(k)), camel(name));
    const Case c = cases_of(all, name).at(0);
    const Tensor out = c.run(c.inputs()).front();
    if (!out.grad_fn()) continue;  // no gradient: compare, argmax, all, any, scaled_mm
    const auto composite = composites.find(name);
    EXPECT_EQ(out.grad_fn()->name(), composite == composites.end() ? camel(name) : composite->second) << name;
  }
}

TEST(MetaOps, ValuesCannotBeReadAndDevicesDoNotMix) {
  const Tensor m = mt::zeros({2, 3}, mt::TensorOptions().device(mt::Device::meta()));
  expect_error([&] { (void)m.sum().item<float>(); }, {"item", "meta"});
  expect_error([&] { (void)m.to_vector<float>(); }, {"to_vector", "meta"});
  expect_error([&] { (void)m.data_ptr<float>(); }, {"data_ptr", "meta"});
  expect_error([&] { (void)m.to(mt::Device::cpu()); }, {"copy", "meta", "cpu"});
  Tensor host = mt::zeros({2, 3});
  expect_error([&] { host.copy_(m); }, {"copy", "meta", "cpu"});
  expect_error([&] { (void)mt::add(m, host); }, {"add", "meta", "cpu"});
  expect_error([&] { (void)mt::matmul(host, m.t()); }, {"matmul", "meta", "cpu"});
}

TEST(MetaOps, PrintingShowsShapeDtypeAndMetaButNoValues) {
  const Tensor m = mt::ones({2, 3}, mt::TensorOptions(mt::kFloat16).device(mt::Device::meta()));
  const std::string s = m.str();
  EXPECT_NE(s.find("device='meta'"), std::string::npos) << s;
  EXPECT_NE(s.find("size=(2, 3)"), std::string::npos) << s;
  EXPECT_NE(s.find("float16"), std::string::npos) << s;
  EXPECT_EQ(s.find('['), std::string::npos) << s;  // no values
  EXPECT_EQ(mt::Device::parse("meta"), mt::Device::meta());
  EXPECT_EQ(mt::Device::meta().str(), "meta");
}

TEST(MetaOps, ModulesAndOptimizersMoveToMetaAndStep) {
  mt::nn::Sequential model(mt::nn::Linear(4, 8), mt::nn::ReLU(), mt::nn::Linear(8, 2));
  model->to(mt::Device::meta());
  for (const Tensor& p : model->parameters()) EXPECT_TRUE(p.device().is_meta());
  mt::optim::AdamW opt(model->parameters(), mt::optim::AdamWOptions(1e-3));
  mt::optim::SGD sgd(model->parameters(), mt::optim::SGDOptions(0.1).momentum(0.9));
  const Tensor x = mt::empty({5, 4}, mt::TensorOptions().device(mt::Device::meta()));
  mt::nn::functional::mse_loss(model->forward(x), mt::zeros({5, 2}, mt::TensorOptions().device(mt::Device::meta())))
      .backward();
  for (const Tensor& p : model->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_TRUE(p.grad().device().is_meta());
    EXPECT_EQ(p.grad().shape(), p.shape());
  }
  opt.step();
  sgd.step();
  opt.zero_grad();
}
