// Reductions, softmax, matrix products and losses against fp64 references written here with
// plain loops, for every dtype; gradients against finite differences; errors.
#include <cmath>

#include "support/testing.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using mt::testing::all_close;
using mt::testing::expect_error;
using mt::testing::float_types;
using mt::testing::gradcheck;
using mt::testing::random_tensor;
using mt::testing::to_doubles;
using mt::testing::tolerance_for;

namespace {

// Reference matmul of row-major [m,k] x [k,n].
std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k, int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

std::vector<double> softmax_rows(const std::vector<double>& x, int64_t rows, int64_t n, bool log) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, x[r * n + j]);
    for (int64_t j = 0; j < n; ++j) s += std::exp(x[r * n + j] - mx);
    for (int64_t j = 0; j < n; ++j)
      out[r * n + j] = log ? x[r * n + j] - mx - std::log(s) : std::exp(x[r * n + j] - mx) / s;
  }
  return out;
}
}  // namespace

TEST(Reduce, SumMeanMaxOverDimsMatchReference) {
  for (mt::DType dt : float_types()) {
    mt::Tensor x = random_tensor({4, 5, 6}, dt, 7);
    const auto v = to_doubles(x);
    std::vector<double> s1(4 * 6, 0), s02(5, 0), mx(4 * 5, -INFINITY);
    double all = 0;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 5; ++j)
        for (int k = 0; k < 6; ++k) {
          const double e = v[(i * 5 + j) * 6 + k];
          s1[i * 6 + k] += e;
          s02[j] += e;
          mx[i * 5 + j] = std::max(mx[i * 5 + j], e);
          all += e;
        }
    // Sums of n rounded inputs: the result is rounded once, so the dtype tolerance holds.
    const auto tol = tolerance_for(dt);
    EXPECT_TRUE(all_close(mt::sum(x, {1}), s1, tol)) << dt;
    EXPECT_TRUE(all_close(mt::sum(x, {0, 2}), s02, tol)) << dt;
    EXPECT_TRUE(all_close(mt::sum(x), std::vector<double>{all}, tol)) << dt;
    std::vector<double> m02;
    for (double e : s02) m02.push_back(e / 24.0);
    EXPECT_TRUE(all_close(mt::mean(x, {0, 2}), m02, tol)) << dt;
    EXPECT_EQ(mt::sum(x, {1}, true).shape(), (mt::Shape{4, 1, 6}));
    EXPECT_TRUE(all_close(mt::max(x, 2), mx, tol)) << dt;
  }
}

// Reduced dims on both sides of the kept ones (a bias gradient's {0, 2, 3}) run as two passes
// over the input as it lies; dims that interleave with kept ones still go through a transpose.
TEST(Reduce, SumsAroundKeptDimsMatchReferenceForEveryDtype) {
  const mt::Shape shape{3, 2, 4, 5, 3};
  const std::vector<std::vector<int64_t>> cases = {{0, 1, 3, 4}, {0, 3, 4}, {0, 4}, {0, 2, 4}, {-5, -1}};
  for (mt::DType dt : float_types()) {
    const mt::Tensor x = random_tensor(shape, dt, 12);
    const auto v = to_doubles(x);
    for (const auto& dims : cases) {
      std::vector<bool> reduced(shape.size(), false);
      for (int64_t d : dims) reduced[(d + 5) % 5] = true;
      mt::Shape kept_shape, keepdim_shape;
      for (size_t d = 0; d < shape.size(); ++d) {
        keepdim_shape.push_back(reduced[d] ? 1 : shape[d]);
        if (!reduced[d]) kept_shape.push_back(shape[d]);
      }
      std::vector<double> ref(static_cast<size_t>(mt::Tensor::empty(keepdim_shape).numel()), 0.0);
      for (int64_t flat = 0; flat < x.numel(); ++flat) {
        int64_t rem = flat, out_index = 0, out_stride = 1;
        for (int64_t d = 4; d >= 0; --d) {
          const int64_t i = rem % shape[d];
          rem /= shape[d];
          if (!reduced[d]) out_index += i * out_stride, out_stride *= shape[d];
        }
        ref[static_cast<size_t>(out_index)] += v[static_cast<size_t>(flat)];
      }
      SCOPED_TRACE(::testing::Message() << dt << " dims " << ::testing::PrintToString(dims));
      const mt::Tensor out = mt::sum(x, dims), out_keep = mt::sum(x, dims, true);
      EXPECT_EQ(out.shape(), kept_shape);
      EXPECT_EQ(out_keep.shape(), keepdim_shape);
      EXPECT_EQ(out.dtype(), dt);
      EXPECT_TRUE(all_close(out, ref, tolerance_for(dt)));
      EXPECT_TRUE(all_close(out_keep, ref, tolerance_for(dt)));
    }
  }
}

TEST(Reduce, HalfMeanDoesNotOverflowWhereItsSumWould) {
  mt::Tensor x = mt::full({4096}, 60.0, mt::TensorOptions(mt::kFloat16));  // sum 245760 > 65504
  EXPECT_FLOAT_EQ(mt::mean(x).item<float>(), 60.0f);
  EXPECT_TRUE(std::isinf(mt::sum(x).item<float>()));
  EXPECT_FLOAT_EQ(mt::sum(x, {}, false, mt::kFloat32).item<float>(), 245760.0f);
}

TEST(Reduce, ArgmaxAndGradients) {
  mt::Tensor x = random_tensor({3, 5}, mt::kFloat64, 9);
  auto idx = mt::argmax(x, 1).to_vector<int64_t>();
  const auto v = to_doubles(x);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_LE(v[i * 5 + j], v[i * 5 + idx[i]]);
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::sum(in[0], {0}); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::mean(in[0].t(), {1}, true); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::max(in[0], 1); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::min(in[0], 0, true); }, {x}));
}

TEST(Softmax, ForwardAndBackwardForEveryDtypeAndDim) {
  for (mt::DType dt : float_types()) {
    mt::Tensor x = random_tensor({6, 10}, dt, 13, -4, 4);
    const auto v = to_doubles(x);
    EXPECT_TRUE(all_close(mt::softmax(x, 1), softmax_rows(v, 6, 10, false), tolerance_for(dt))) << dt;
    EXPECT_TRUE(all_close(mt::log_softmax(x, -1), softmax_rows(v, 6, 10, true), tolerance_for(dt))) << dt;
    // dim 0 equals softmax of the transpose.
    EXPECT_TRUE(all_close(mt::softmax(x, 0), mt::softmax(x.t().contiguous(), 1).t(), tolerance_for(dt)));
    mt::Tensor with_dtype = mt::softmax(x, 1, mt::kFloat32);
    EXPECT_EQ(with_dtype.dtype(), mt::kFloat32);
  }
  mt::Tensor x = random_tensor({3, 4, 2}, mt::kFloat64, 14);
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::softmax(in[0], 1); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::log_softmax(in[0], 2); }, {x}));
}

TEST(Softmax, LargeLogitsStayFinite) {
  mt::Tensor x = mt::from_vector(std::vector<float>{1000, 1001, 999}, {1, 3});
  auto p = mt::softmax(x, 1).to_vector<float>();
  EXPECT_NEAR(p[0] + p[1] + p[2], 1.0f, 1e-6);
  EXPECT_TRUE(std::isfinite(mt::log_softmax(x, 1).to_vector<float>()[2]));
}

TEST(Matmul, EveryDtypeAndLayoutMatchesReference) {
  for (mt::DType dt : float_types()) {
    mt::Tensor a = random_tensor({17, 23}, dt, 61), b = random_tensor({23, 9}, dt, 62);
    const auto ref = matmul_ref(to_doubles(a), to_doubles(b), 17, 23, 9);
    // Inner products of 23 terms: fp32 accumulation then one rounding.
    mt::testing::Tolerance tol = tolerance_for(dt);
    EXPECT_TRUE(all_close(mt::matmul(a, b), ref, tol)) << dt;
    EXPECT_TRUE(all_close(mt::matmul(a.t().contiguous().t(), b.t().contiguous().t()), ref, tol)) << dt;
    mt::Tensor out = mt::matmul(a, b);
    EXPECT_EQ(out.dtype(), dt);
  }
}

TEST(Matmul, HalfAccumulatesInFp32AndRoundsOnce) {
  // 4096 products of 1 * 1: an fp16 accumulator would stop at 2048; fp32 accumulation gives 4096
  // exactly, representable in fp16.
  mt::Tensor a = mt::ones({1, 4096}, mt::TensorOptions(mt::kFloat16));
  mt::Tensor b = mt::ones({4096, 1}, mt::TensorOptions(mt::kFloat16));
  EXPECT_EQ(mt::matmul(a, b).item<float>(), 4096.0f);
}

TEST(Matmul, BatchedBroadcastAndVectorForms) {
  mt::Tensor a = random_tensor({2, 3, 4, 5}, mt::kFloat64, 71), b = random_tensor({3, 5, 6}, mt::kFloat64, 72);
  mt::Tensor c = mt::matmul(a, b);
  ASSERT_EQ(c.shape(), (mt::Shape{2, 3, 4, 6}));
  const auto av = to_doubles(a), bv = to_doubles(b), cv = to_doubles(c);
  for (int i = 0; i < 2; ++i)
    for (int h = 0; h < 3; ++h) {
      std::vector<double> as(av.begin() + (i * 3 + h) * 20, av.begin() + (i * 3 + h + 1) * 20);
      std::vector<double> bs(bv.begin() + h * 30, bv.begin() + (h + 1) * 30);
      const auto r = matmul_ref(as, bs, 4, 5, 6);
      for (int k = 0; k < 24; ++k) EXPECT_NEAR(cv[(i * 3 + h) * 24 + k], r[k], 1e-12);
    }
  EXPECT_EQ(mt::matmul(random_tensor({5}, mt::kFloat64, 1), random_tensor({5}, mt::kFloat64, 2)).dim(), 0);
  EXPECT_EQ(mt::matmul(random_tensor({4, 5}, mt::kFloat64, 1), random_tensor({5}, mt::kFloat64, 2)).shape(), (mt::Shape{4}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::matmul(in[0], in[1]); },
                        {random_tensor({2, 3, 4}, mt::kFloat64, 3), random_tensor({4, 2}, mt::kFloat64, 4)}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::bmm(in[0], in[1].transpose(1, 2)); },
                        {random_tensor({2, 3, 4}, mt::kFloat64, 5), random_tensor({2, 5, 4}, mt::kFloat64, 6)}));
}

TEST(Linear, ForwardMatchesReferenceAndGradientsCheck) {
  for (mt::DType dt : float_types()) {
    mt::Tensor x = random_tensor({6, 8}, dt, 81), w = random_tensor({4, 8}, dt, 82), b = random_tensor({4}, dt, 83);
    const auto xv = to_doubles(x), wv = to_doubles(w), bv = to_doubles(b);
    std::vector<double> ref(24);
    for (int i = 0; i < 6; ++i)
      for (int o = 0; o < 4; ++o) {
        double s = bv[o];
        for (int k = 0; k < 8; ++k) s += xv[i * 8 + k] * wv[o * 8 + k];
        ref[i * 4 + o] = s;
      }
    EXPECT_TRUE(all_close(mt::linear(x, w, b), ref, tolerance_for(dt))) << dt;
  }
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::linear(in[0], in[1], in[2]); },
                        {random_tensor({2, 3, 5}, mt::kFloat64, 1), random_tensor({4, 5}, mt::kFloat64, 2),
                         random_tensor({4}, mt::kFloat64, 3)}));
}

TEST(Loss, MseCrossEntropyBceMatchReferences) {
  for (mt::DType dt : float_types()) {
    mt::Tensor p = random_tensor({5, 3}, dt, 91), t = random_tensor({5, 3}, dt, 92);
    const auto pv = to_doubles(p), tv = to_doubles(t);
    double mse = 0, bce = 0;
    for (size_t i = 0; i < pv.size(); ++i) {
      mse += (pv[i] - tv[i]) * (pv[i] - tv[i]);
      const double sig = 1 / (1 + std::exp(-pv[i]));
      bce += -(tv[i] * std::log(sig) + (1 - tv[i]) * std::log(1 - sig));
    }
    EXPECT_TRUE(all_close(F::mse_loss(p, t), std::vector<double>{mse / 15}, tolerance_for(dt))) << dt;
    EXPECT_TRUE(all_close(F::binary_cross_entropy_with_logits(p, t), std::vector<double>{bce / 15}, tolerance_for(dt))) << dt;

    mt::Tensor logits = random_tensor({4, 6}, dt, 93, -3, 3);
    mt::Tensor labels = mt::from_vector(std::vector<int64_t>{0, 5, 2, 2}, {4});
    const auto lv = to_doubles(logits);
    const auto lp = softmax_rows(lv, 4, 6, true);
    const int64_t lab[] = {0, 5, 2, 2};
    double ce = 0;
    for (int i = 0; i < 4; ++i) ce -= lp[i * 6 + lab[i]];
    EXPECT_TRUE(all_close(F::cross_entropy(logits, labels), std::vector<double>{ce / 4}, tolerance_for(dt))) << dt;
  }
  mt::Tensor labels = mt::from_vector(std::vector<int64_t>{1, 0, 2}, {3});
  EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& in) { return F::cross_entropy(in[0], labels); },
                        {random_tensor({3, 4}, mt::kFloat64, 94)}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return F::mse_loss(in[0], in[1]); },
                        {random_tensor({3, 2}, mt::kFloat64, 95), random_tensor({3, 2}, mt::kFloat64, 96)}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return F::binary_cross_entropy_with_logits(in[0], in[1]); },
                        {random_tensor({3, 2}, mt::kFloat64, 97), random_tensor({3, 2}, mt::kFloat64, 98, 0, 1)}));
}

TEST(Loss, BadInputsRaiseClearErrors) {
  mt::Tensor logits = mt::randn({3, 4});
  expect_error([&] { F::cross_entropy(logits, mt::from_vector(std::vector<int64_t>{0, 7, 1}, {3})); },
               "out of range for 4 classes");
  EXPECT_THROW(F::cross_entropy(logits, mt::from_vector(std::vector<float>{0, 1, 1}, {3})), mt::Error);
  EXPECT_THROW(F::cross_entropy(logits, mt::from_vector(std::vector<int64_t>{0, 1}, {2})), mt::Error);
  EXPECT_THROW(F::mse_loss(mt::randn({3, 2}), mt::randn({2, 3})), mt::Error);
  expect_error([] { mt::matmul(mt::randn({2, 3}), mt::randn({4, 5})); },
               "matmul: shapes [2, 3] and [4, 5] cannot be multiplied");
  EXPECT_THROW(mt::matmul(mt::randn({2, 3}), mt::randn({3, 2}).to(mt::kFloat16)), mt::Error);
  EXPECT_THROW(mt::linear(mt::randn({2, 3}), mt::randn({4, 5})), mt::Error);
}
