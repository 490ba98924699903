// Sequential runs a Linear followed by a ReLU as one linear_relu: the same values and gradients
// as the two modules one after the other, bit for bit, in every dtype and under autocast; and
// no fusion where it would change what runs (a Linear subclass, a non-default relu policy).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "support/testing.h"

namespace mt = mixtrain;
namespace nn = mixtrain::nn;
using mt::Tensor;
using mt::testing::random_tensor;
using mt::testing::to_doubles;

namespace {

// How many nodes of each name the graph behind y has.
std::map<std::string, int> graph_nodes(const Tensor& y) {
  std::map<std::string, int> count;
  std::set<const mt::autograd::Node*> seen;
  std::vector<const mt::autograd::Node*> todo{y.grad_fn().get()};
  while (!todo.empty()) {
    const mt::autograd::Node* n = todo.back();
    todo.pop_back();
    if (n == nullptr || !seen.insert(n).second) continue;
    ++count[n->name()];
    for (const auto& e : n->next_edges) todo.push_back(e.node.get());
  }
  return count;
}

// Each module's forward on the previous one's output: Sequential without the fusion.
Tensor unfused_forward(const nn::Sequential& model, const Tensor& input) {
  Tensor x = input;
  for (const auto& m : *model) x = m->forward(x);
  return x;
}

// Output, input gradient and every parameter gradient of one forward and backward.
std::vector<std::vector<double>> run(const nn::Sequential& model, const Tensor& x0, const Tensor& gy, bool fused) {
  model.zero_grad();
  Tensor x = x0.detach().set_requires_grad(true);
  Tensor y = fused ? model(x) : unfused_forward(model, x);
  y.backward(gy);
  std::vector<std::vector<double>> r{to_doubles(y), to_doubles(x.grad())};
  for (const Tensor& p : model.parameters()) r.push_back(to_doubles(p.grad()));
  return r;
}

nn::Sequential mlp(bool bias) {
  return nn::Sequential(nn::Linear(10, 16, bias), nn::ReLU(), nn::Linear(16, 8, bias), nn::ReLU(), nn::Linear(8, 3));
}

// y = 2 (x W^T + b): a subclass whose forward Sequential must call.
class DoubledLinearImpl : public nn::LinearImpl {
 public:
  using nn::LinearImpl::LinearImpl;
  Tensor forward(const Tensor& input) override { return mt::mul(nn::LinearImpl::forward(input), 2.0); }
};

}  // namespace

TEST(SequentialFusion, LinearThenReluRecordsOneFusedNode) {
  mt::manual_seed(1);
  const nn::Sequential model = mlp(true);
  const auto nodes = graph_nodes(model(random_tensor({4, 10}, mt::kFloat32, 2)));
  EXPECT_EQ(nodes.count("LinearReluBackward0") ? nodes.at("LinearReluBackward0") : 0, 2);
  EXPECT_EQ(nodes.count("LinearBackward0") ? nodes.at("LinearBackward0") : 0, 1);
  EXPECT_EQ(nodes.count("ReluBackward0"), 0u) << "no separate ReLU node";
  // A ReLU after another module, and a Linear followed by anything else, are left alone.
  const nn::Sequential other(nn::Linear(10, 4), nn::GELU(), nn::ReLU(), nn::Linear(4, 4));
  const auto other_nodes = graph_nodes(other(random_tensor({4, 10}, mt::kFloat32, 3)));
  EXPECT_EQ(other_nodes.count("LinearReluBackward0"), 0u);
  EXPECT_EQ(other_nodes.count("ReluBackward0"), 1u);
}

TEST(SequentialFusion, ValuesAndGradientsEqualTheUnfusedChainBitForBit) {
  for (mt::DType dt : {mt::kFloat32, mt::kFloat64, mt::kFloat16, mt::kBFloat16}) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(std::string(mt::dtype_name(dt)) + (bias ? " bias" : " no bias"));
      mt::manual_seed(5);
      const nn::Sequential model = mlp(bias);
      model.to(dt);
      const Tensor x = random_tensor({2, 7, 10}, dt, 6), gy = random_tensor({2, 7, 3}, dt, 7);
      const auto fused = run(model, x, gy, true), unfused = run(model, x, gy, false);
      ASSERT_EQ(fused.size(), unfused.size());
      for (size_t i = 0; i < fused.size(); ++i) EXPECT_EQ(fused[i], unfused[i]) << "result " << i;
    }
  }
}

TEST(SequentialFusion, UnderAutocastTheFusedModelCastsAsTheUnfusedOne) {
  mt::manual_seed(8);
  const nn::Sequential model = mlp(true);
  const Tensor x = random_tensor({6, 10}, mt::kFloat32, 9), gy = random_tensor({6, 3}, mt::kFloat16, 10);
  std::vector<std::vector<double>> fused, unfused;
  Tensor y;
  {
    mt::amp::AutocastGuard autocast(mt::DeviceType::CPU, mt::kFloat16);
    y = model(x);
    fused = run(model, x, gy, true);
    unfused = run(model, x, gy, false);
  }
  EXPECT_EQ(y.dtype(), mt::kFloat16);
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_EQ(fused[i], unfused[i]) << "result " << i;
}

TEST(SequentialFusion, NotFusedWhereThatWouldChangeWhatRuns) {
  mt::manual_seed(11);
  // A Linear subclass keeps its own forward.
  auto doubled = std::make_shared<DoubledLinearImpl>(5, 4);
  const nn::Sequential model(doubled, nn::ReLU());
  const Tensor x = random_tensor({3, 5}, mt::kFloat32, 12);
  EXPECT_EQ(to_doubles(model(x)), to_doubles(mt::relu(doubled->forward(x))));
  EXPECT_EQ(graph_nodes(model(x)).count("LinearReluBackward0"), 0u);

  // A relu policy that casts: linear_relu would keep fp16, relu must run in fp32.
  const nn::Sequential plain(nn::Linear(10, 16), nn::ReLU(), nn::Linear(16, 8), nn::ReLU());
  mt::amp::set_policy("relu", mt::amp::CastPolicy::Float32);
  Tensor y, y_unfused;
  {
    mt::amp::AutocastGuard autocast(mt::DeviceType::CPU, mt::kFloat16);
    y = plain(random_tensor({4, 10}, mt::kFloat32, 13));
    y_unfused = unfused_forward(plain, random_tensor({4, 10}, mt::kFloat32, 13));
  }
  mt::amp::reset_policy_table();
  const auto nodes = graph_nodes(y);
  EXPECT_EQ(nodes.count("LinearReluBackward0"), 0u);
  EXPECT_EQ(nodes.count("ReluBackward0") ? nodes.at("ReluBackward0") : 0, 2);
  EXPECT_EQ(y.dtype(), mt::kFloat32);
  EXPECT_EQ(to_doubles(y), to_doubles(y_unfused));
}
