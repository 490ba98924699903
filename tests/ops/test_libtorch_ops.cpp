// clamp, masked_fill, topk and norm in every float dtype against fp64 references written here
// with plain loops (forward, and backward against the reference's numerical derivative),
// gradcheck in fp64 with non-contiguous inputs, the topk kernels into poisoned outputs, and the
// errors. PyTorch's own values for the same ops: test_libtorch_pytorch.cpp.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/reduce.h"
#include "ops/op_reference.h"

namespace mt = mixtrain;
using mt::Tensor;
using namespace mixtrain::testing;

namespace {

// Values away from the clamp bounds by more than the finite-difference step, so the reference
// derivative is the one-sided one everywhere.
Tensor away_from(const Tensor& x, std::initializer_list<double> bounds) {
  std::vector<double> v = to_doubles(x);
  for (double& e : v)
    for (double b : bounds)
      if (std::abs(e - b) < 1e-2) e = b + 0.05;
  return mt::from_vector(v, x.shape()).to(x.dtype());
}

// Rows of [rows, n] and the row-wise p-norm, as the op defines it.
Values norm_rows(const Values& x, int64_t rows, int64_t n, double p) {
  Values out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double acc = std::isinf(p) ? (p > 0 ? 0.0 : INFINITY) : 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double a = std::abs(x[static_cast<size_t>(r * n + j)]);
      if (std::isinf(p)) acc = p > 0 ? std::max(acc, a) : std::min(acc, a);
      else acc += p == 0 ? (a != 0) : std::pow(a, p);
    }
    out[static_cast<size_t>(r)] = std::isinf(p) || p == 0 ? acc : std::pow(acc, 1.0 / p);
  }
  return out;
}

}  // namespace

TEST(LibtorchOps, ClampForwardAndBackwardInEveryFloatDtype) {
  for (mt::DType dt : float_types()) {
    const Tensor x = away_from(random_tensor({4, 6}, dt, 1, -2, 2), {-0.5, 0.75});
    check_op(std::string("clamp ") + mt::dtype_name(dt), [](const std::vector<Tensor>& in) { return in[0].clamp(-0.5, 0.75); },
             [](const std::vector<Values>& in) {
               Values y = in[0];
               for (double& v : y) v = std::min(std::max(v, -0.5), 0.75);
               return y;
             },
             {x}, {0}, tolerance_for(dt));
    check_op(std::string("clamp_min ") + mt::dtype_name(dt), [](const std::vector<Tensor>& in) { return in[0].clamp_min(-0.5); },
             [](const std::vector<Values>& in) {
               Values y = in[0];
               for (double& v : y) v = std::max(v, -0.5);
               return y;
             },
             {x}, {0}, tolerance_for(dt));
  }
}

TEST(LibtorchOps, MaskedFillAndTopkForwardAndBackwardInEveryFloatDtype) {
  const Tensor mask = mt::tensor({{true, false, false, true, false}});
  for (mt::DType dt : float_types()) {
    const Tensor x = random_tensor({3, 5}, dt, 2);
    check_op(std::string("masked_fill ") + mt::dtype_name(dt),
             [&](const std::vector<Tensor>& in) { return in[0].masked_fill(mask, 0.25); },
             [](const std::vector<Values>& in) {
               Values y = in[0];
               for (size_t i = 0; i < y.size(); ++i)
                 if (i % 5 == 0 || i % 5 == 3) y[i] = 0.25;
               return y;
             },
             {x}, {0}, tolerance_for(dt));
    // Distinct values, so the order (and the finite differences) are unambiguous.
    std::vector<double> perm(15);
    std::iota(perm.begin(), perm.end(), 0.0);
    std::rotate(perm.begin(), perm.begin() + 7, perm.end());
    for (double& v : perm) v = v * 0.125 - 1.0;
    const Tensor xs = mt::from_vector(perm, {3, 5}).to(dt);
    check_op(std::string("topk ") + mt::dtype_name(dt), [](const std::vector<Tensor>& in) { return std::get<0>(in[0].topk(2, 1)); },
             [](const std::vector<Values>& in) {
               Values y;
               for (int r = 0; r < 3; ++r) {
                 Values row(in[0].begin() + r * 5, in[0].begin() + r * 5 + 5);
                 std::sort(row.rbegin(), row.rend());
                 y.push_back(row[0]);
                 y.push_back(row[1]);
               }
               return y;
             },
             {xs}, {0}, tolerance_for(dt));
  }
}

TEST(LibtorchOps, NormForwardAndBackwardInEveryFloatDtype) {
  for (mt::DType dt : float_types()) {
    for (double p : {2.0, 1.0, 3.0, 0.5, double(INFINITY)}) {
      const Tensor x = random_tensor({3, 6}, dt, 3, 0.2, 1.5) * mt::tensor({{1, -1, 1, -1, 1, -1}}).to(dt);
      // Half dtypes: the reference differentiates through values that are themselves rounded.
      const Tolerance tol = tolerance_for(dt);
      check_op(std::string("norm p=") + std::to_string(p) + " " + mt::dtype_name(dt),
               [p](const std::vector<Tensor>& in) { return in[0].norm(p, 1); },
               [p](const std::vector<Values>& in) { return norm_rows(in[0], 3, 6, p); }, {x}, {0}, tol);
    }
  }
}

TEST(LibtorchOps, GradcheckInFp64WithNonContiguousInputs) {
  const Tensor x = random_tensor({5, 4}, mt::kFloat64, 4, -2, 2).t();  // transposed: not contiguous
  ASSERT_FALSE(x.is_contiguous());
  const Tensor xc = away_from(x.contiguous(), {-0.3, 0.4}).t().contiguous().t();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0].clamp(-0.3, 0.4); }, {xc}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0].clamp_max(0.4); }, {xc}));
  const Tensor lo = random_tensor({5}, mt::kFloat64, 5, -1.5, -0.5), hi = random_tensor({4, 1}, mt::kFloat64, 6, 0.5, 1.5);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0].clamp(in[1], in[2]); }, {x, lo, hi}));
  const Tensor mask = mt::tensor({true, false, true, false, false});
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return in[0].masked_fill(mask, in[1]); },
                        {x, mt::tensor(0.5).to(mt::kFloat64)}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return std::get<0>(in[0].topk(2, 0, false)); }, {x}));
  for (double p : {2.0, 1.0, 3.0, 1.5, 0.5})
    EXPECT_TRUE(gradcheck([p](const std::vector<Tensor>& in) { return in[0].norm(p, {0}, true); }, {x})) << p;
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0].norm(); }, {x}));
}

TEST(LibtorchOps, NormSubgradientsAreZeroAtZeroAndSplitAmongTiedMaxima) {
  Tensor z = mt::zeros({2, 3}, mt::kFloat64).set_requires_grad(true);
  z.norm(2, 1).sum().backward();
  EXPECT_EQ(to_doubles(z.grad()), Values(6, 0.0));  // not nan
  Tensor t = mt::tensor({3.0, -3.0, 1.0}).set_requires_grad(true);
  t.norm(INFINITY).backward();
  EXPECT_EQ(to_doubles(t.grad()), (Values{0.5, -0.5, 0.0}));
  // Half inputs are summed in fp32: fp16 values whose squares overflow fp16 still have a norm.
  const Tensor big = mt::full({4}, 300.0, mt::kFloat16);
  EXPECT_EQ(big.norm().item<float>(), 600.0f);
  EXPECT_EQ(big.norm().dtype(), mt::kFloat16);
}

TEST(LibtorchOps, TopkKernelsWriteEveryOutput) {
  for (mt::DType dt : {mt::kFloat32, mt::kFloat16, mt::kBFloat16, mt::kFloat64, mt::kInt64, mt::kInt32}) {
    const Tensor x = mt::tensor({{5, 1, 4, 2, 3}, {0, 9, 8, 7, 6}}).to(dt);
    Tensor values = poisoned({2, 3}, dt), indices = poisoned({2, 3}, mt::kInt64);
    mt::backends::topk(x, x, 2, 5, 3, true, values, indices);
    EXPECT_EQ(to_doubles(values), (Values{5, 4, 3, 9, 8, 7})) << dt;
    EXPECT_EQ(indices.to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 4, 1, 2, 3})) << dt;
    Tensor small = poisoned({2, 2}, dt), small_idx = poisoned({2, 2}, mt::kInt64);
    mt::backends::topk(x, x, 2, 5, 2, false, small, small_idx);
    EXPECT_EQ(to_doubles(small), (Values{1, 2, 0, 6})) << dt;
    EXPECT_EQ(small_idx.to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 0, 4})) << dt;
  }
  for (mt::DType dt : float_types()) {
    const Tensor g = mt::tensor({{1.0, 2.0}, {3.0, 4.0}}).to(dt);
    const Tensor idx = mt::tensor({{4, 0}, {2, 1}});
    Tensor gx = poisoned({2, 5}, dt);
    mt::backends::topk_backward(g, g, idx, 2, 5, 2, gx);
    EXPECT_EQ(to_doubles(gx), (Values{2, 0, 0, 0, 1, 0, 4, 3, 0, 0})) << dt;
  }
}

TEST(LibtorchOps, TopkOrderTiesNanAndShapes) {
  const Tensor x = mt::tensor({2.0, NAN, 2.0, -1.0, 5.0});
  auto [v, i] = x.topk(3);
  EXPECT_TRUE(std::isnan(v.to_vector<float>()[0]));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 4, 0}));
  auto [vs, is] = x.topk(3, 0, false);
  EXPECT_EQ(vs.to_vector<float>(), (std::vector<float>{-1, 2, 2}));  // ties in index order
  EXPECT_EQ(is.to_vector<int64_t>(), (std::vector<int64_t>{3, 0, 2}));
  auto [v0, i0] = mt::tensor(3.5).topk(1);  // a 0-d tensor has one element
  EXPECT_EQ(v0.dim(), 0);
  EXPECT_EQ(i0.item<int64_t>(), 0);
  auto [ve, ie] = mt::zeros({3, 0}).topk(0);
  EXPECT_EQ(ve.shape(), (mt::Shape{3, 0}));
}

TEST(LibtorchOps, ClampAndMaskedFillKeepLibtorchsDtypes) {
  const Tensor xi = mt::tensor({-5, 0, 3, 8});
  EXPECT_EQ(xi.clamp(-1, 4).dtype(), mt::kLong);
  EXPECT_EQ(xi.clamp(-1, 4).to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, 3, 4}));
  EXPECT_EQ(xi.clamp(0.5).dtype(), mt::kFloat);  // a floating bound makes it float
  EXPECT_EQ(xi.clamp(std::nullopt, 2).to_vector<int64_t>(), (std::vector<int64_t>{-5, 0, 2, 2}));
  EXPECT_EQ(mt::tensor({1.5, -1.5}).to(mt::kHalf).clamp(0, 1).dtype(), mt::kHalf);
  EXPECT_EQ(xi.masked_fill(xi > 0.0, 2.7).to_vector<int64_t>(), (std::vector<int64_t>{-5, 0, 2, 2}));  // truncated
  Tensor y = mt::tensor({1.0, -2.0, 3.0});
  y.clamp_(-1, 1);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, -1, 1}));
  y.masked_fill_(y < 0.0, 0.0);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 0, 1}));
}

TEST(LibtorchOps, BadArgumentsNameTheOpAndTheTensors) {
  const Tensor x = mt::ones({2, 3});
  expect_error([&] { (void)x.clamp(std::optional<mt::Scalar>(), std::nullopt); }, {"clamp", "at least one"});
  expect_error([&] { (void)mt::tensor({true}).clamp(0, 1); }, {"clamp", "bool"});
  expect_error([&] { (void)x.masked_fill(mt::ones({2, 3}), 1.0); }, {"masked_fill", "mask must be bool", "[2, 3] float32"});
  expect_error([&] { (void)x.masked_fill(mt::ones({4, 3}, mt::kBool), 1.0); }, {"masked_fill", "[4, 3]", "[2, 3]"});
  expect_error([&] { (void)x.masked_fill(mt::ones({3}, mt::kBool), mt::ones({2})); }, {"masked_fill", "0-dimensional"});
  expect_error([&] { (void)x.topk(4); }, {"topk", "k (4)", "size 3", "[2, 3] float32"});
  expect_error([&] { (void)x.topk(1, 2); }, {"topk", "dim"});
  expect_error([&] { (void)mt::ones({2}, mt::kBool).topk(1); }, {"topk", "bool"});
  expect_error([&] { (void)mt::tensor({1, 2}).norm(); }, {"norm", "int64"});
  expect_error([&] { (void)x.norm(NAN); }, {"norm", "nan"});
  expect_error([&] { (void)x.norm(2, 5); }, {"norm", "5"});
  expect_error([&] { (void)x.allclose(mt::ones({2, 3}, mt::kFloat64)); }, {"isclose", "same dtype"});
  expect_error([&] { (void)x.allclose(x, -1.0); }, {"isclose", "non-negative"});
  expect_error([&] { (void)mt::zeros({1}, mt::TensorOptions().device(mt::Device::meta())).equal(x.reshape({-1})); },
               {"equal", "device"});
}
