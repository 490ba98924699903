// Elementwise ops: every dtype against an fp64 reference computed here with <cmath>, broadcasting,
// type promotion, gradients against finite differences, and bad-input errors.
#include <cmath>
#include <functional>

#include "support/testing.h"

namespace mt = mixtrain;
using mt::testing::all_close;
using mt::testing::expect_error;
using mt::testing::float_types;
using mt::testing::gradcheck;
using mt::testing::random_tensor;
using mt::testing::to_doubles;
using mt::testing::tolerance_for;

namespace {

struct UnaryCase {
  const char* name;
  std::function<mt::Tensor(const mt::Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;
};

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const mt::Tensor& x) { return mt::neg(x); }, [](double x) { return -x; }, -2, 2},
      {"exp", [](const mt::Tensor& x) { return mt::exp(x); }, [](double x) { return std::exp(x); }, -3, 3},
      {"log", [](const mt::Tensor& x) { return mt::log(x); }, [](double x) { return std::log(x); }, 0.1, 5},
      {"sqrt", [](const mt::Tensor& x) { return mt::sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.1, 5},
      {"rsqrt", [](const mt::Tensor& x) { return mt::rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.1, 5},
      {"tanh", [](const mt::Tensor& x) { return mt::tanh(x); }, [](double x) { return std::tanh(x); }, -3, 3},
      {"sigmoid", [](const mt::Tensor& x) { return mt::sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -4, 4},
      {"relu", [](const mt::Tensor& x) { return mt::relu(x); }, [](double x) { return x > 0 ? x : 0; }, -2, 2},
      {"gelu", [](const mt::Tensor& x) { return mt::gelu(x); }, gelu_ref, -3, 3},
      {"abs", [](const mt::Tensor& x) { return mt::abs(x); }, [](double x) { return std::abs(x); }, -2, 2},
      {"square", [](const mt::Tensor& x) { return mt::square(x); }, [](double x) { return x * x; }, -2, 2},
      {"pow", [](const mt::Tensor& x) { return mt::pow(x, 1.7); }, [](double x) { return std::pow(x, 1.7); }, 0.1, 3},
  };
}

struct BinaryCase {
  const char* name;
  std::function<mt::Tensor(const mt::Tensor&, const mt::Tensor&)> op;
  std::function<double(double, double)> ref;
  double lo, hi;
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const mt::Tensor& a, const mt::Tensor& b) { return a + b; }, [](double a, double b) { return a + b; }, -2, 2},
      {"sub", [](const mt::Tensor& a, const mt::Tensor& b) { return a - b; }, [](double a, double b) { return a - b; }, -2, 2},
      {"mul", [](const mt::Tensor& a, const mt::Tensor& b) { return a * b; }, [](double a, double b) { return a * b; }, -2, 2},
      {"div", [](const mt::Tensor& a, const mt::Tensor& b) { return a / b; }, [](double a, double b) { return a / b; }, 0.5, 2},
      {"pow", [](const mt::Tensor& a, const mt::Tensor& b) { return mt::pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 0.5, 2},
      {"maximum", [](const mt::Tensor& a, const mt::Tensor& b) { return mt::maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, -2, 2},
      {"minimum", [](const mt::Tensor& a, const mt::Tensor& b) { return mt::minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, -2, 2},
  };
}

// Reference for a broadcast binary op over row-major shapes, by explicit index arithmetic.
std::vector<double> broadcast_ref(const std::vector<double>& a, const mt::Shape& sa, const std::vector<double>& b,
                                  const mt::Shape& sb, const mt::Shape& so, const std::function<double(double, double)>& f) {
  const int64_t n = mt::shape_numel(so);
  std::vector<double> out(n);
  auto index_into = [&](int64_t flat, const mt::Shape& s) {
    int64_t idx = 0, stride = 1, rem = flat;
    std::vector<int64_t> coord(so.size());
    for (int64_t d = static_cast<int64_t>(so.size()) - 1; d >= 0; --d) {
      coord[d] = rem % so[d];
      rem /= so[d];
    }
    for (int64_t d = static_cast<int64_t>(s.size()) - 1, od = static_cast<int64_t>(so.size()) - 1; d >= 0; --d, --od) {
      idx += (s[d] == 1 ? 0 : coord[od]) * stride;
      stride *= s[d];
    }
    return idx;
  };
  for (int64_t i = 0; i < n; ++i) out[i] = f(a[index_into(i, sa)], b[index_into(i, sb)]);
  return out;
}

}  // namespace

TEST(Unary, ForwardMatchesFp64ReferenceForEveryDtype) {
  for (const auto& c : unary_cases()) {
    for (mt::DType dt : float_types()) {
      mt::Tensor x = random_tensor({7, 33}, dt, 11, c.lo, c.hi);
      std::vector<double> ref;
      for (double v : to_doubles(x)) ref.push_back(c.ref(v));
      mt::Tensor y = c.op(x);
      EXPECT_EQ(y.dtype(), dt) << c.name;
      EXPECT_TRUE(all_close(y, ref, tolerance_for(dt))) << c.name << " " << dt;
    }
  }
}

TEST(Unary, WorksOnNonContiguousInputs) {
  for (const auto& c : unary_cases()) {
    mt::Tensor x = random_tensor({9, 5}, mt::kFloat32, 3, c.lo, c.hi).t();
    std::vector<double> ref;
    for (double v : to_doubles(x)) ref.push_back(c.ref(v));
    EXPECT_TRUE(all_close(c.op(x), ref, tolerance_for(mt::kFloat32))) << c.name;
  }
}

TEST(Unary, GradientsMatchFiniteDifferences) {
  for (const auto& c : unary_cases()) {
    mt::Tensor x = random_tensor({3, 4}, mt::kFloat64, 5, c.lo, c.hi);
    if (std::string(c.name) == "relu" || std::string(c.name) == "abs") x = mt::add(x, 0.05);  // keep off the kink
    EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& in) { return c.op(in[0]); }, {x})) << c.name;
  }
}

TEST(Binary, BroadcastingForwardMatchesReferenceForEveryDtype) {
  const std::vector<std::pair<mt::Shape, mt::Shape>> shapes = {
      {{4, 5}, {4, 5}}, {{4, 5}, {5}}, {{2, 1, 5}, {3, 1}}, {{}, {3, 2}}, {{6, 1}, {1, 7}}};
  for (const auto& c : binary_cases()) {
    for (mt::DType dt : float_types()) {
      for (const auto& [sa, sb] : shapes) {
        mt::Tensor a = random_tensor(sa, dt, 21, c.lo, c.hi), b = random_tensor(sb, dt, 22, c.lo, c.hi);
        const mt::Shape so = mt::broadcast_shapes(sa, sb, "test");
        mt::Tensor out = c.op(a, b);
        ASSERT_EQ(out.shape(), so) << c.name;
        EXPECT_TRUE(all_close(out, broadcast_ref(to_doubles(a), sa, to_doubles(b), sb, so, c.ref), tolerance_for(dt)))
            << c.name << " " << dt << " " << mt::shape_str(sa) << " " << mt::shape_str(sb);
      }
    }
  }
}

TEST(Binary, GradientsMatchFiniteDifferencesWithBroadcasting) {
  for (const auto& c : binary_cases()) {
    mt::Tensor a = random_tensor({3, 4}, mt::kFloat64, 31, c.lo, c.hi);
    mt::Tensor b = random_tensor({4}, mt::kFloat64, 32, c.lo, c.hi);
    if (std::string(c.name) == "maximum" || std::string(c.name) == "minimum") b = mt::add(b, 3.0);  // no ties
    EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& in) { return c.op(in[0], in[1]); }, {a, b})) << c.name;
    mt::Tensor at = random_tensor({4, 3}, mt::kFloat64, 33, c.lo, c.hi);
    EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& in) { return c.op(in[0].t(), in[1]); }, {at, b}))
        << c.name << " non-contiguous";
  }
}

TEST(Binary, ScalarFormsAndTheirGradients) {
  mt::Tensor x = random_tensor({5}, mt::kFloat64, 41, 0.5, 2.0);
  const auto xs = to_doubles(x);
  std::vector<double> r1, r2, r3, r4;
  for (double v : xs) {
    r1.push_back(v * 3 + 1);
    r2.push_back(2 - v);
    r3.push_back(4 / v);
    r4.push_back(v / 2 - 0.5);
  }
  auto tol = tolerance_for(mt::kFloat64);
  EXPECT_TRUE(all_close(x * 3.0 + 1.0, r1, tol));
  EXPECT_TRUE(all_close(2.0 - x, r2, tol));
  EXPECT_TRUE(all_close(4.0 / x, r3, tol));
  EXPECT_TRUE(all_close(x / 2.0 - 0.5, r4, tol));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return 4.0 / in[0] + 2.0 - in[0] * 3.0; }, {x}));
}

TEST(Binary, TypePromotionFollowsPyTorch) {
  mt::Tensor h = random_tensor({3}, mt::kFloat16, 1), f = random_tensor({3}, mt::kFloat32, 2);
  mt::Tensor b = random_tensor({3}, mt::kBFloat16, 3), d = random_tensor({3}, mt::kFloat64, 4);
  EXPECT_EQ((h + f).dtype(), mt::kFloat32);
  EXPECT_EQ((h + b).dtype(), mt::kFloat32);
  EXPECT_EQ((b * f).dtype(), mt::kFloat32);
  EXPECT_EQ((b * d).dtype(), mt::kFloat64);
  EXPECT_EQ((f * d).dtype(), mt::kFloat64);
  EXPECT_EQ((h * 2.0).dtype(), mt::kFloat16);
  // The mixed result equals computing both in the wider type.
  EXPECT_TRUE(all_close(h + f, mt::add(h.to(mt::kFloat32), f), tolerance_for(mt::kFloat32)));
  // Gradients flow back through the implicit cast in each input's own dtype.
  mt::Tensor hl = random_tensor({3}, mt::kFloat16, 5).set_requires_grad(true);
  mt::Tensor fl = random_tensor({3}, mt::kFloat32, 6).set_requires_grad(true);
  (hl * fl).sum().backward();
  EXPECT_EQ(hl.grad().dtype(), mt::kFloat16);
  EXPECT_EQ(fl.grad().dtype(), mt::kFloat32);
}

TEST(Binary, HalfArithmeticOverflowsToInfLikeTheGpu) {
  mt::Tensor a = mt::full({2}, 60000.0, mt::TensorOptions(mt::kFloat16));
  auto v = (a + a).to_vector<float>();
  EXPECT_TRUE(std::isinf(v[0]) && v[0] > 0);
  mt::Tensor b = mt::full({1}, 3.0e38, mt::TensorOptions(mt::kBFloat16));
  EXPECT_TRUE(std::isinf((b * 10.0).item<float>()));
}

TEST(CompareWhere, MatchReferenceAndRouteGradients) {
  mt::Tensor a = random_tensor({4, 3}, mt::kFloat64, 51), b = random_tensor({3}, mt::kFloat64, 52);
  mt::Tensor c = mt::gt(a, b);
  EXPECT_EQ(c.dtype(), mt::kBool);
  const auto av = to_doubles(a), bv = to_doubles(b);
  const auto cv = c.to_vector<bool>();
  for (size_t i = 0; i < av.size(); ++i) EXPECT_EQ(cv[i], av[i] > bv[i % 3]);
  EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& in) { return mt::where(c, in[0], in[1]); }, {a, b}));
}

TEST(ElementwiseErrors, NameTheOpShapesAndDtypes) {
  expect_error([] { mt::add(mt::randn({2, 3}), mt::randn({4})); }, {"add", "[2, 3]", "[4]"});
  expect_error([] { mt::exp(mt::from_vector(std::vector<int64_t>{1, 2}, {2})); }, "int64");
  mt::Tensor leaf = mt::randn({2}, mt::TensorOptions().requires_grad(true));
  EXPECT_THROW(leaf.add_(mt::randn({2})), mt::Error);
}
