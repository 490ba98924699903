// The libtorch spellings: sum/mean by one dim, comparisons as methods and operators, max/min
// with and without a dim, var/std and index_select against fp64 references and gradient checks,
// requires_grad_, kCPU/kCUDA.
#include <cmath>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::all_close;
using mt::testing::expect_error;
using mt::testing::gradcheck;
using mt::testing::random_tensor;
using mt::testing::to_doubles;
using mt::testing::tolerance_for;

TEST(LibtorchSpellings, ReductionsByOneDim) {
  const Tensor x = random_tensor({3, 4, 5}, mt::kFloat32, 1);
  EXPECT_EQ(to_doubles(x.sum(1)), to_doubles(x.sum({1})));
  EXPECT_EQ(x.sum(1).shape(), (mt::Shape{3, 5}));
  EXPECT_EQ(x.mean(-1, true).shape(), (mt::Shape{3, 4, 1}));
  EXPECT_EQ(to_doubles(x.mean(2, true)), to_doubles(x.mean({2}, true)));
  EXPECT_EQ(x.sum({}).dim(), 0) << "an empty list still reduces everything";

  auto [values, indices] = x.max(1);
  EXPECT_EQ(to_doubles(values), to_doubles(mt::max(x, 1)));
  EXPECT_EQ(to_doubles(indices), to_doubles(x.argmax(1)));
  auto [mins, where] = x.min(2, /*keepdim=*/true);
  EXPECT_EQ(mins.shape(), (mt::Shape{3, 4, 1}));
  const auto xv = to_doubles(x), mv = to_doubles(mins), wv = to_doubles(where);
  for (size_t r = 0; r < 12; ++r) {
    double lo = xv[r * 5];
    int64_t at = 0;
    for (int64_t k = 1; k < 5; ++k)
      if (xv[r * 5 + static_cast<size_t>(k)] < lo) lo = xv[r * 5 + static_cast<size_t>(k)], at = k;
    EXPECT_EQ(mv[r], lo);
    EXPECT_EQ(wv[r], static_cast<double>(at));
  }
  EXPECT_EQ(x.max().item<float>(), *std::max_element(xv.begin(), xv.end()));
  EXPECT_EQ(x.min().item<float>(), *std::min_element(xv.begin(), xv.end()));
  EXPECT_EQ(x.max().dim(), 0);
}

TEST(LibtorchSpellings, ComparisonsReturnBoolTensors) {
  const Tensor a = mt::from_vector(std::vector<float>{1, 2, 3, 4}, {4});
  const Tensor b = mt::from_vector(std::vector<float>{4, 2, 1, 4}, {4});
  auto as_ints = [](const Tensor& t) {
    EXPECT_EQ(t.dtype(), mt::kBool);
    return t.to(mt::kInt64).to_vector<int64_t>();
  };
  EXPECT_EQ(as_ints(a == b), (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(as_ints(a != b), (std::vector<int64_t>{1, 0, 1, 0}));
  EXPECT_EQ(as_ints(a < b), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(as_ints(a <= b), (std::vector<int64_t>{1, 1, 0, 1}));
  EXPECT_EQ(as_ints(a > b), (std::vector<int64_t>{0, 0, 1, 0}));
  EXPECT_EQ(as_ints(a >= b), (std::vector<int64_t>{0, 1, 1, 1}));
  EXPECT_EQ(as_ints(a.eq(2.0)), (std::vector<int64_t>{0, 1, 0, 0}));
  EXPECT_EQ(as_ints(a > 2.5), (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(as_ints(a.ne(b)), as_ints(a != b));
  // An integer tensor against a fraction compares as floats, as PyTorch promotes it.
  const Tensor i = mt::from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  EXPECT_EQ(as_ints(i.lt(2.5)), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_EQ(as_ints(i.ge(2.0)), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(as_ints(a.to(mt::kFloat16).le(2.0)), (std::vector<int64_t>{1, 1, 0, 0}));
}

namespace {
// fp64 variance of x [a, b] over dim d (0 or 1) or everything (d < 0).
std::vector<double> ref_var(const std::vector<double>& x, int64_t a, int64_t b, int d, bool unbiased) {
  auto var_of = [&](const std::vector<double>& v) {
    double m = 0, s = 0;
    for (double e : v) m += e;
    m /= static_cast<double>(v.size());
    for (double e : v) s += (e - m) * (e - m);
    return s / static_cast<double>(unbiased ? v.size() - 1 : v.size());
  };
  if (d < 0) return {var_of(x)};
  std::vector<double> out;
  for (int64_t o = 0; o < (d == 0 ? b : a); ++o) {
    std::vector<double> v;
    for (int64_t k = 0; k < (d == 0 ? a : b); ++k) v.push_back(d == 0 ? x[static_cast<size_t>(k * b + o)] : x[static_cast<size_t>(o * b + k)]);
    out.push_back(var_of(v));
  }
  return out;
}
}  // namespace

TEST(LibtorchSpellings, VarStdAgainstFp64) {
  for (mt::DType dt : mt::testing::float_types()) {
    SCOPED_TRACE(mt::dtype_name(dt));
    const Tensor x = random_tensor({6, 7}, dt, 3, -2.0, 3.0);
    const std::vector<double> xd = to_doubles(x);
    for (bool unbiased : {true, false}) {
      for (int d : {-1, 0, 1}) {
        const std::vector<double> v = ref_var(xd, 6, 7, d, unbiased);
        std::vector<double> s;
        for (double e : v) s.push_back(std::sqrt(e));
        const Tensor got_v = d < 0 ? x.var(unbiased) : x.var(d, unbiased);
        const Tensor got_s = d < 0 ? x.std(unbiased) : x.std(static_cast<int64_t>(d), unbiased, /*keepdim=*/true);
        EXPECT_EQ(got_v.dtype(), dt);
        if (d >= 0) EXPECT_EQ(got_s.dim(), 2);
        EXPECT_TRUE(all_close(got_v, v, tolerance_for(dt))) << "var d=" << d << " unbiased=" << unbiased;
        EXPECT_TRUE(all_close(got_s, s, tolerance_for(dt))) << "std d=" << d << " unbiased=" << unbiased;
      }
    }
  }
  // A single element: n - 1 = 0, nan as in PyTorch; biased it is 0.
  EXPECT_TRUE(std::isnan(mt::ones({1}).var().item<float>()));
  EXPECT_EQ(mt::ones({1}).var(false).item<float>(), 0.0f);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0].var({0, 2}) + in[0].std(1, false, true).sum(); },
                        {random_tensor({3, 4, 2}, mt::kFloat64, 5)}));
}

TEST(LibtorchSpellings, IndexSelectForwardAndBackward) {
  for (mt::DType dt : mt::testing::float_types()) {
    SCOPED_TRACE(mt::dtype_name(dt));
    const Tensor x = random_tensor({4, 5, 3}, dt, 7);
    const std::vector<double> xd = to_doubles(x);
    const std::vector<int64_t> idx{2, 0, 2, 1};
    const Tensor index = mt::from_vector(idx, {4});
    for (int64_t dim : {0, 1, 2, -1}) {
      const int64_t d = dim < 0 ? dim + 3 : dim;
      const Tensor y = x.index_select(dim, index);
      mt::Shape want = x.shape();
      want[static_cast<size_t>(d)] = 4;
      ASSERT_EQ(y.shape(), want);
      std::vector<double> ref;
      for (int64_t a = 0; a < want[0]; ++a)
        for (int64_t b = 0; b < want[1]; ++b)
          for (int64_t c = 0; c < want[2]; ++c) {
            int64_t p[3] = {a, b, c};
            p[d] = idx[static_cast<size_t>(p[d])];
            ref.push_back(xd[static_cast<size_t>((p[0] * 5 + p[1]) * 3 + p[2])]);
          }
      EXPECT_EQ(to_doubles(y), ref) << "dim " << dim;  // a gather: exact
    }
  }
  const Tensor index = mt::from_vector(std::vector<int64_t>{3, 1, 3, 3}, {4});
  for (int64_t dim : {0, 1})
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return mt::index_select(in[0], dim, index) * in[0].sum(); },
                          {random_tensor({4, 4}, mt::kFloat64, 11)}))
        << "dim " << dim;
  // Integers gather too (without gradient); errors name the op.
  const Tensor ints = mt::from_vector(std::vector<int64_t>{10, 11, 12, 13, 14, 15}, {3, 2});
  EXPECT_EQ(ints.index_select(0, mt::from_vector(std::vector<int64_t>{2, 0}, {2})).to_vector<int64_t>(),
            (std::vector<int64_t>{14, 15, 10, 11}));
  expect_error([&] { (void)ints.index_select(0, mt::from_vector(std::vector<int64_t>{3}, {1})); },
               "index_select: index 3 is out of range for dimension 0 of size 3");
  expect_error([&] { (void)ints.index_select(2, mt::from_vector(std::vector<int64_t>{0}, {1})); }, "dim 2 is out of range");
  expect_error([&] { (void)ints.index_select(0, mt::zeros({1})); }, "index must be an int64 tensor");
}

TEST(LibtorchSpellings, RequiresGradAndDeviceConstants) {
  Tensor w = mt::zeros({2});
  EXPECT_TRUE(w.requires_grad_().requires_grad());
  EXPECT_FALSE(w.requires_grad_(false).requires_grad());
  EXPECT_EQ(w.to(mt::kCPU).device(), mt::Device::cpu());
  EXPECT_EQ(mt::Device(mt::kCUDA), mt::Device::cuda(0));
  if (!mt::cuda::is_available()) return;
  EXPECT_TRUE(w.to(mt::kCUDA).device().is_cuda());
}
