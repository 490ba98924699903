// nn::checkpoint: gradients bit-identical to the run without checkpointing (a transformer-like
// block with dropout under bf16 autocast on the CPU, and a conv/BatchNorm stage), BatchNorm's
// running statistics updated once, parameters reached when no input requires grad, nesting,
// and errors for an input written in place before backward and for an impure function.
#include <string>
#include <vector>

#include "support/testing.h"

namespace mt = mixtrain;
namespace nn = mixtrain::nn;
namespace F = mixtrain::nn::functional;
using mt::Tensor;
using mt::testing::bytes_of;
using mt::testing::expect_error;
using mt::testing::random_tensor;

namespace {

using Bytes = std::vector<std::vector<uint8_t>>;

// Pre-LN attention and MLP with dropout on both branches and in the attention weights.
struct Block {
  nn::LayerNorm ln1 = nn::LayerNorm(mt::Shape{16}), ln2 = nn::LayerNorm(mt::Shape{16});
  nn::MultiheadAttention attn = nn::MultiheadAttention(nn::MultiheadAttentionOptions(16, 2).dropout(0.2).batch_first(true));
  nn::Linear fc1 = nn::Linear(16, 32), fc2 = nn::Linear(32, 16);
  nn::Dropout drop = nn::Dropout(0.25);

  Tensor forward(const Tensor& x) {
    const Tensor h = ln1(x);
    const Tensor a = x + drop(attn->forward(h, h, h, Tensor(), true));
    return a + drop(fc2(mt::gelu(fc1(ln2(a)))));
  }
  std::vector<Tensor> parameters() {
    std::vector<Tensor> ps;
    for (const auto& list : {ln1.parameters(), ln2.parameters(), attn.parameters(), fc1.parameters(), fc2.parameters()})
      for (const Tensor& p : list) ps.push_back(p);
    return ps;
  }
};

// Two blocks, each checkpointed or not; bf16 autocast around the forward as the trainers do.
Bytes run_blocks(bool use_checkpoint, bool autocast) {
  mt::manual_seed(42);
  Block b1, b2;
  Tensor x = random_tensor({2, 5, 16}, mt::kFloat32, 3).set_requires_grad(true);
  mt::manual_seed(1234);  // the dropout draws
  Tensor loss;
  {
    mt::amp::AutocastGuard guard(mt::DeviceType::CPU, mt::kBFloat16, autocast);
    auto apply = [&](Block& b, const Tensor& in) {
      return use_checkpoint ? nn::checkpoint([&b](const Tensor& t) { return b.forward(t); }, in) : b.forward(in);
    };
    Tensor y = apply(b2, apply(b1, mt::mul(x, 2.0)));
    loss = mt::mul(y.to(mt::kFloat32), y.to(mt::kFloat32)).mean();
  }
  loss.backward();
  Bytes out{bytes_of(loss), bytes_of(x.grad())};
  for (Block* b : {&b1, &b2})
    for (const Tensor& p : b->parameters()) {
      EXPECT_TRUE(p.grad().defined());
      out.push_back(bytes_of(p.grad()));
    }
  // The generator ends where it would have: the recomputation's draws are given back.
  const mt::GeneratorState s = mt::default_generator().state();
  out.push_back({static_cast<uint8_t>(s.offset), static_cast<uint8_t>(s.offset >> 8)});
  return out;
}

}  // namespace

TEST(Checkpoint, TransformerBlockGradientsAreBitIdenticalUnderBf16AutocastWithDropout) {
  const Bytes plain = run_blocks(false, true), checkpointed = run_blocks(true, true);
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(plain[i], checkpointed[i]) << "tensor " << i;
  EXPECT_EQ(run_blocks(false, false), run_blocks(true, false)) << "fp32";
}

TEST(Checkpoint, ForwardKeepsNoGraphInsideTheRegion) {
  mt::manual_seed(1);
  Block b;
  Tensor x = random_tensor({2, 5, 16}, mt::kFloat32, 3).set_requires_grad(true);
  Tensor y = nn::checkpoint([&b](const Tensor& t) { return b.forward(t); }, x);
  ASSERT_TRUE(y.requires_grad());
  EXPECT_STREQ(y.grad_fn()->name(), "CheckpointBackward0");
  // Its only edge leads to x: the region's own nodes were never recorded.
  ASSERT_EQ(y.grad_fn()->next_edges.size(), 1u);
  EXPECT_STREQ(y.grad_fn()->next_edges[0].node->name(), "AccumulateGrad");
  // Grad mode off: checkpoint is a plain call.
  mt::NoGradGuard no_grad;
  EXPECT_FALSE(nn::checkpoint([&b](const Tensor& t) { return b.forward(t); }, x).requires_grad());
}

TEST(Checkpoint, ConvBatchNormStageMatchesAndUpdatesRunningStatisticsOnce) {
  auto run = [](bool use_checkpoint) {
    mt::manual_seed(5);
    nn::Sequential stage(nn::Conv2d(nn::Conv2dOptions(2, 4, 3).padding(1)),
                         nn::ReLU(nn::ReLUOptions().inplace(true)), nn::BatchNorm2d(4));
    // The image needs no gradient: only the parameters inside the region do.
    Tensor img = random_tensor({2, 2, 6, 6}, mt::kFloat32, 6);
    Tensor y = use_checkpoint ? nn::checkpoint([&stage](const Tensor& t) { return stage->forward(t); }, img)
                              : stage->forward(img);
    mt::mul(y, y).sum().backward();
    Bytes out;
    for (const auto& p : stage->parameters()) out.push_back(bytes_of(p.grad()));
    for (const auto& b : stage->buffers()) out.push_back(bytes_of(b));
    return out;
  };
  EXPECT_EQ(run(false), run(true));
}

TEST(Checkpoint, NestedCheckpointsMatch) {
  auto run = [](bool use_checkpoint) {
    mt::manual_seed(3);
    nn::Linear l1(4, 4), l2(4, 4);
    Tensor x = random_tensor({3, 4}, mt::kFloat32, 1).set_requires_grad(true);
    auto inner = [&](const Tensor& t) { return mt::tanh(l2(t)); };
    auto outer = [&](const Tensor& t) {
      Tensor h = F::dropout(l1(t), 0.5, true);
      return use_checkpoint ? nn::checkpoint(inner, h) : inner(h);
    };
    mt::manual_seed(9);
    Tensor y = use_checkpoint ? nn::checkpoint(outer, x) : outer(x);
    y.sum().backward();
    return Bytes{bytes_of(x.grad()), bytes_of(l1->weight.grad()), bytes_of(l2->weight.grad())};
  };
  EXPECT_EQ(run(false), run(true));
}

TEST(Checkpoint, SeveralInputsAndOutputs) {
  Tensor a = random_tensor({3}, mt::kFloat32, 1).set_requires_grad(true);
  Tensor b = random_tensor({3}, mt::kFloat32, 2).set_requires_grad(true);
  Tensor c = random_tensor({3}, mt::kFloat32, 3);  // no gradient wanted
  auto fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{mt::mul(in[0], in[1]), mt::exp(mt::add(in[1], in[2]))};
  };
  std::vector<Tensor> outs = nn::checkpoint(fn, {a, b, c});
  ASSERT_EQ(outs.size(), 2u);
  mt::add(outs[0].sum(), mt::mul(outs[1], 3.0).sum()).backward();
  const auto ga = a.grad(), gb = b.grad();
  a.set_grad(Tensor());
  b.set_grad(Tensor());
  std::vector<Tensor> ref = fn({a, b, c});
  mt::add(ref[0].sum(), mt::mul(ref[1], 3.0).sum()).backward();
  EXPECT_EQ(bytes_of(ga), bytes_of(a.grad()));
  EXPECT_EQ(bytes_of(gb), bytes_of(b.grad()));
  EXPECT_FALSE(c.grad().defined());
  // Only one output used: the other's gradient is zero, not a failure.
  a.set_grad(Tensor());
  nn::checkpoint(fn, {a, b, c})[1].sum().backward();
  EXPECT_FALSE(a.grad().defined());
}

TEST(Checkpoint, AnInputWrittenInPlaceBeforeBackwardRaises) {
  nn::Linear l(3, 3);
  Tensor x = random_tensor({2, 3}, mt::kFloat32, 1).set_requires_grad(true);
  Tensor h = mt::mul(x, 2.0);
  Tensor y = nn::checkpoint([&l](const Tensor& t) { return l(t); }, h);
  h.relu_();  // the recomputation would read the new values
  expect_error([&] { y.sum().backward(); }, {"CheckpointBackward0", "modified by an inplace operation", "checkpoint input"});
}

TEST(Checkpoint, AnImpureFunctionIsCaughtInBackward) {
  Tensor x = random_tensor({4}, mt::kFloat32, 1).set_requires_grad(true);
  int calls = 0;
  Tensor y = nn::checkpoint([&calls](const Tensor& t) { return ++calls == 1 ? mt::exp(t) : mt::exp(t).reshape({2, 2}); }, x);
  expect_error([&] { y.sum().backward(); }, {"checkpoint", "recomputed in backward", "pure"});
  expect_error([] { (void)nn::checkpoint([](const Tensor& t) { return t.gt(0.0); }, Tensor(mt::zeros({2}))); },
               {"checkpoint", "floating"});
}
