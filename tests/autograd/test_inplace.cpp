// Differentiable in-place ops (relu_, add_, dropout_, ReLU/Dropout with inplace): gradients
// against fp64 finite differences and bit for bit against the out-of-place ops in each dtype
// (also under autocast), PyTorch's errors for a leaf, the rebased grad_fn, the version bump, and
// an error at backward (never a wrong gradient) when something backward saved is written.
#include <string>
#include <vector>

#include "support/testing.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using mt::Tensor;
using mt::testing::bytes_of;
using mt::testing::expect_error;
using mt::testing::random_tensor;

namespace {

constexpr const char* kInplaceError = "modified by an inplace operation";

enum class Which { Relu, Add, Dropout };

// h = x * s (a non-leaf, nothing saves it), then the op on h in place or out of place, then a
// weighted sum so every element's gradient matters. Returns the loss; x's and r's grads are set.
Tensor run(Which op, bool inplace, const Tensor& x, const Tensor& r, const Tensor& weights) {
  Tensor h = mt::mul(x, 1.5);
  mt::manual_seed(7);
  switch (op) {
    case Which::Relu: h = inplace ? Tensor(h.relu_()) : mt::relu(h); break;
    case Which::Add: h = inplace ? Tensor(h.add_(r, 0.5)) : mt::add(h, mt::mul(r, 0.5)); break;
    case Which::Dropout: h = inplace ? Tensor(F::dropout_(h, 0.4, true)) : F::dropout(h, 0.4, true); break;
  }
  return mt::mul(h.to(weights.dtype()), weights).sum();
}

const char* name_of(Which op) { return op == Which::Relu ? "relu_" : op == Which::Add ? "add_" : "dropout_"; }

}  // namespace

TEST(InplaceOps, GradientsMatchFiniteDifferencesInFp64) {
  for (Which op : {Which::Relu, Which::Add, Which::Dropout}) {
    SCOPED_TRACE(name_of(op));
    // Away from relu's kink, where a finite difference would straddle it.
    Tensor x = random_tensor({3, 5}, mt::kFloat64, 1, 0.1, 1.0);
    Tensor sign = mt::sub(mt::mul(random_tensor({3, 5}, mt::kFloat64, 2).gt(0.0).to(mt::kFloat64), 2.0), 1.0);
    x = mt::mul(x, sign);
    Tensor r = random_tensor({5}, mt::kFloat64, 3);  // broadcast over the rows
    auto fn = [op](const std::vector<Tensor>& in) {
      Tensor h = mt::mul(in[0], 1.5);
      mt::manual_seed(11);  // the same dropout mask on every evaluation
      if (op == Which::Relu) h.relu_();
      if (op == Which::Add) h.add_(in[1], 0.5);
      if (op == Which::Dropout) F::dropout_(h, 0.4, true);
      return mt::add(h, mt::mul(in[1], 0.0).sum());  // r is an input of every case
    };
    EXPECT_TRUE(mt::testing::gradcheck(fn, {x.set_requires_grad(true), r.set_requires_grad(true)}));
  }
}

TEST(InplaceOps, MatchTheOutOfPlaceOpsBitForBitAndTheFp64ReferenceInEachDtype) {
  for (Which op : {Which::Relu, Which::Add, Which::Dropout}) {
    for (mt::DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16}) {
      SCOPED_TRACE(std::string(name_of(op)) + " " + mt::dtype_name(dt));
      const Tensor weights = random_tensor({4, 6}, mt::kFloat32, 5);
      // The reference starts from the same (rounded) inputs, in fp64.
      auto grads = [&](bool inplace, bool reference) {
        Tensor x = random_tensor({4, 6}, mt::kFloat64, 6).to(dt);
        Tensor r = random_tensor({6}, mt::kFloat64, 8).to(dt);
        if (reference) {
          x = x.to(mt::kFloat64);
          r = r.to(mt::kFloat64);
        }
        x.set_requires_grad(true);
        r.set_requires_grad(true);
        Tensor loss = run(op, inplace, x, r, reference ? weights.to(mt::kFloat64) : weights);
        loss.backward();
        return std::vector<Tensor>{loss, x.grad(), op == Which::Add ? r.grad() : Tensor()};
      };
      const auto in = grads(true, false), out = grads(false, false), ref = grads(false, true);
      for (size_t i = 0; i < in.size(); ++i) {
        if (!in[i].defined()) continue;
        EXPECT_EQ(bytes_of(in[i]), bytes_of(out[i])) << "tensor " << i;
        EXPECT_TRUE(mt::testing::all_close(in[i], ref[i], mt::testing::tolerance_for(dt))) << "tensor " << i;
      }
    }
  }
}

TEST(InplaceOps, UnderAutocastMatchTheOutOfPlaceOps) {
  for (Which op : {Which::Relu, Which::Add, Which::Dropout}) {
    SCOPED_TRACE(name_of(op));
    auto grads = [&](bool inplace) {
      Tensor x = random_tensor({4, 8}, mt::kFloat32, 1).set_requires_grad(true);
      Tensor w = random_tensor({6, 8}, mt::kFloat32, 2).set_requires_grad(true);
      Tensor r = random_tensor({6}, mt::kFloat32, 3).set_requires_grad(true);
      Tensor loss;
      {
        mt::amp::AutocastGuard autocast(mt::DeviceType::CPU, mt::kBFloat16);
        Tensor h = F::linear(x, w);  // bf16 under autocast; saves x and w, not h
        EXPECT_EQ(h.dtype(), mt::kBFloat16);
        mt::manual_seed(3);
        if (op == Which::Relu) h = inplace ? Tensor(h.relu_()) : mt::relu(h);
        if (op == Which::Add) h = inplace ? Tensor(h.add_(r)) : mt::add(h, r.to(mt::kBFloat16));
        if (op == Which::Dropout) h = inplace ? Tensor(F::dropout_(h, 0.3, true)) : F::dropout(h, 0.3, true);
        EXPECT_EQ(h.dtype(), mt::kBFloat16);
        loss = mt::mul(h, h).sum();
      }
      loss.backward();
      return std::vector<std::vector<uint8_t>>{bytes_of(loss), bytes_of(x.grad()), bytes_of(w.grad()),
                                               op == Which::Add ? bytes_of(r.grad()) : std::vector<uint8_t>{}};
    };
    EXPECT_EQ(grads(true), grads(false));
  }
}

TEST(InplaceOps, RebaseTheGradFnAndBumpTheVersion) {
  Tensor x = random_tensor({3}, mt::kFloat32, 1).set_requires_grad(true);
  Tensor h = mt::mul(x, 2.0);
  const uint64_t v = h.version();
  h.relu_();
  EXPECT_EQ(h.version(), v + 1);
  EXPECT_STREQ(h.grad_fn()->name(), "ReluBackward0");
  h.add_(x);
  EXPECT_EQ(h.version(), v + 2);
  EXPECT_STREQ(h.grad_fn()->name(), "AddBackward0");
  F::dropout_(h, 0.5, true);
  EXPECT_EQ(h.version(), v + 3);
  EXPECT_STREQ(h.grad_fn()->name(), "DropoutBackward0");
  // Not training, or p = 0: untouched.
  F::dropout_(h, 0.5, false);
  F::dropout_(h, 0.0, true);
  EXPECT_EQ(h.version(), v + 3);
  // Without grad: a plain write that still bumps the version.
  Tensor c = random_tensor({3}, mt::kFloat32, 2);
  c.relu_();
  EXPECT_EQ(c.version(), 1u);
  EXPECT_FALSE(c.requires_grad());
}

TEST(InplaceOps, ALeafThatRequiresGradIsRefusedUnderGradMode) {
  Tensor w = random_tensor({3}, mt::kFloat32, 1).set_requires_grad(true);
  Tensor other = random_tensor({3}, mt::kFloat32, 2);
  const char* leaf = "a leaf Variable that requires grad is being used in an in-place operation";
  expect_error([&] { w.relu_(); }, {"relu_", leaf, "[3]"});
  expect_error([&] { w.add_(other); }, {"add_", leaf});
  expect_error([&] { F::dropout_(w, 0.5, true); }, {"dropout_", leaf});
  EXPECT_EQ(w.version(), 0u) << "a refused op must not write";
  mt::NoGradGuard no_grad;  // as an optimizer does
  w.add_(other);
  w.relu_();
  EXPECT_EQ(w.version(), 2u);
}

TEST(InplaceOps, WritingATensorThatBackwardSavedRaisesAtBackward) {
  // Each op writes the output of an op whose backward reads its output: the gradient would be
  // wrong, so backward raises, naming the node and the tensor.
  for (Which op : {Which::Relu, Which::Add, Which::Dropout}) {
    SCOPED_TRACE(name_of(op));
    Tensor x = random_tensor({2, 3}, mt::kFloat32, 1).set_requires_grad(true);
    Tensor y = mt::sigmoid(x);  // saves its output
    if (op == Which::Relu) y.relu_();
    if (op == Which::Add) y.add_(x);
    if (op == Which::Dropout) F::dropout_(y, 0.5, true);
    expect_error([&] { y.sum().backward(); }, {"SigmoidBackward0", kInplaceError, "output 0", "[2, 3]"});
  }
  // relu_ saved its own result: writing it afterwards is caught too.
  Tensor x = random_tensor({2, 3}, mt::kFloat32, 2).set_requires_grad(true);
  Tensor h = mt::mul(x, 3.0);
  h.relu_();
  h.add_(x);
  expect_error([&] { h.sum().backward(); }, {"ReluBackward0", kInplaceError, "output 0 (self after relu_)"});
  // A saved input: mul saves both inputs; relu_ writes one after the mul.
  Tensor a = random_tensor({4}, mt::kFloat32, 3).set_requires_grad(true);
  Tensor b = mt::mul(a, 2.0);
  Tensor c = mt::mul(b, a);  // saves b
  b.relu_();
  expect_error([&] { c.sum().backward(); }, {"MulBackward", kInplaceError, "input 0"});
}

TEST(InplaceOps, AStaleViewOrBaseIsRefusedWhenUsed) {
  Tensor x = random_tensor({2, 3}, mt::kFloat32, 1).set_requires_grad(true);
  // A view made before its base was written in place holds the new values but the old history.
  Tensor h = mt::mul(x, 2.0);
  Tensor v = h.reshape({6});
  h.relu_();
  expect_error([&] { (void)mt::mul(v, 3.0); }, {"MulBackward0", kInplaceError, "did not record"});
  // The base of a view written in place likewise.
  Tensor h2 = mt::mul(x, 2.0);
  Tensor v2 = h2.reshape({6});
  v2.relu_();
  expect_error([&] { (void)mt::mul(h2, 3.0); }, {kInplaceError, "did not record"});
  // The written view itself carries the in-place op's history: its gradient is relu's.
  v2.sum().backward();
  Tensor expected = mt::mul(x.gt(0.0).to(mt::kFloat32), 2.0);
  EXPECT_EQ(bytes_of(x.grad()), bytes_of(expected));
}

TEST(InplaceOps, RefuseAnExpandedTensorAndBadShapes) {
  Tensor h = random_tensor({1, 3}, mt::kFloat32, 1).expand({4, 3});
  expect_error([&] { h.relu_(); }, {"relu_", "more than one element", "single memory location"});
  Tensor a = random_tensor({3}, mt::kFloat32, 2), b = random_tensor({2, 3}, mt::kFloat32, 3);
  expect_error([&] { a.add_(b); }, {"add_", "[2, 3]", "does not broadcast"});
  Tensor i = mt::zeros({3}, mt::TensorOptions(mt::kInt64));
  expect_error([&] { i.relu_(); }, "relu_");
}

TEST(InplaceOps, ModulesWithInplaceMatchTheOutOfPlaceModules) {
  auto run_model = [](bool inplace) {
    mt::manual_seed(1);
    // Dropout first: a ReLU right after a Linear is fused into the GEMM (linear_relu) instead.
    mt::nn::Sequential model(mt::nn::Linear(5, 8),
                             mt::nn::Dropout(mt::nn::DropoutOptions(0.25).inplace(inplace)),
                             mt::nn::ReLU(mt::nn::ReLUOptions().inplace(inplace)),
                             mt::nn::Linear(8, 2));
    Tensor x = random_tensor({6, 5}, mt::kFloat32, 9);
    mt::manual_seed(2);
    Tensor loss = mt::mul(model->forward(x), model->forward(x)).sum();
    loss.backward();
    std::vector<std::vector<uint8_t>> out{bytes_of(loss)};
    for (const auto& p : model->parameters()) out.push_back(bytes_of(p.grad()));
    return out;
  };
  EXPECT_EQ(run_model(true), run_model(false));
  EXPECT_TRUE(mt::nn::ReLU(mt::nn::ReLUOptions().inplace(true))->options().inplace());
  EXPECT_TRUE(mt::nn::Dropout(mt::nn::DropoutOptions(0.1).inplace(true))->inplace());
  EXPECT_FALSE(mt::nn::Dropout(0.1)->inplace());
}

TEST(InplaceOps, NonContiguousSelfMatchesTheOutOfPlaceOps) {
  // A transposed non-leaf: the kernels walk it through its strides (dropout_ through a copy).
  for (Which op : {Which::Relu, Which::Add, Which::Dropout}) {
    for (mt::DType dt : {mt::kFloat32, mt::kBFloat16}) {
      SCOPED_TRACE(std::string(name_of(op)) + " " + mt::dtype_name(dt));
      auto grads = [&](bool inplace) {
        Tensor x = random_tensor({5, 4}, mt::kFloat64, 21).to(dt).set_requires_grad(true);
        Tensor r = random_tensor({5}, mt::kFloat64, 22).to(dt).set_requires_grad(true);
        Tensor h = mt::mul(x, 1.5).t();  // [4, 5], strides (1, 4)
        EXPECT_FALSE(h.is_contiguous());
        mt::manual_seed(5);
        if (op == Which::Relu) h = inplace ? Tensor(h.relu_()) : mt::relu(h);
        if (op == Which::Add) h = inplace ? Tensor(h.add_(r)) : mt::add(h, r);
        if (op == Which::Dropout) h = inplace ? Tensor(F::dropout_(h, 0.5, true)) : F::dropout(h, 0.5, true);
        Tensor loss = mt::mul(h.to(mt::kFloat32), random_tensor({4, 5}, mt::kFloat32, 23)).sum();
        loss.backward();
        return std::vector<std::vector<uint8_t>>{bytes_of(h), bytes_of(x.grad()),
                                                 op == Which::Add ? bytes_of(r.grad()) : std::vector<uint8_t>{}};
      };
      EXPECT_EQ(grads(true), grads(false));
    }
  }
}
