// cross_entropy with ignore_index and label smoothing, over [N, C] and [N, C, H, W] logits,
// against an fp64 reference for every dtype (PyTorch's definition: per target position
// (1 - eps) * -log p[target] + eps / C * sum_c -log p[c], averaged over the positions that are not
// ignored); gradients against its numerical derivative and gradcheck in fp64 with a
// non-contiguous input; the all-ignored and out-of-range cases.
#include <cmath>

#include "ops/op_reference.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using namespace mixtrain::testing;

namespace {

// logits [n, c, inner] (row-major), targets [n, inner].
Values cross_entropy_ref(const Values& x, const std::vector<int64_t>& target, int64_t n, int64_t c, int64_t inner,
                         int64_t ignore_index, double eps) {
  double total = 0;
  int64_t valid = 0;
  for (int64_t o = 0; o < n; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t t = target[o * inner + i];
      if (t == ignore_index) continue;
      double mx = -INFINITY, s = 0;
      for (int64_t k = 0; k < c; ++k) mx = std::max(mx, x[(o * c + k) * inner + i]);
      for (int64_t k = 0; k < c; ++k) s += std::exp(x[(o * c + k) * inner + i] - mx);
      const double lse = mx + std::log(s);
      double smooth = 0;
      for (int64_t k = 0; k < c; ++k) smooth += lse - x[(o * c + k) * inner + i];
      total += (1 - eps) * (lse - x[(o * c + t) * inner + i]) + eps / c * smooth;
      ++valid;
    }
  return {total / valid};
}

struct CeCase {
  mt::Shape logits;  // [N, C] or [N, C, H, W]
  std::vector<int64_t> target;
  int64_t ignore_index;
  double label_smoothing;
};

mt::Shape target_shape(const mt::Shape& logits) {
  mt::Shape s = logits;
  s.erase(s.begin() + 1);
  return s;
}

const CeCase kCases[] = {
    {{4, 5}, {0, 4, 2, 2}, -100, 0.0},
    {{4, 5}, {0, -100, 3, 1}, -100, 0.1},  // default ignore_index present, smoothing
    // [N, C, H, W] = [2, 3, 2, 2]: segmentation-style targets with a custom ignore label.
    {{2, 3, 2, 2}, {0, 2, 255, 1, 1, 255, 0, 2}, 255, 0.0},
    {{2, 3, 2, 2}, {0, 2, 255, 1, 1, 255, 0, 2}, 255, 0.2},
    {{2, 4, 3}, {3, 1, 1, 0, 2, 2}, 1, 0.05},  // ignore_index that is also a valid class
};

}  // namespace

TEST(CrossEntropy, MatchesReferenceForEveryDtypeWithIgnoreIndexAndSmoothing) {
  int index = 0;
  for (const CeCase& c : kCases) {
    const int64_t n = c.logits[0], classes = c.logits[1], inner = mt::shape_numel(c.logits) / (n * classes);
    const mt::Tensor target = mt::from_vector(c.target, target_shape(c.logits));
    const F::CrossEntropyOptions options{c.ignore_index, c.label_smoothing};
    for (mt::DType dt : float_types()) {
      auto op = [&](const std::vector<mt::Tensor>& in) { return F::cross_entropy(in[0], target, options); };
      auto ref = [&](const std::vector<Values>& in) {
        return cross_entropy_ref(in[0], c.target, n, classes, inner, c.ignore_index, c.label_smoothing);
      };
      check_op("cross_entropy case " + std::to_string(index) + " " + mt::dtype_name(dt), op, ref,
               {random_tensor(c.logits, dt, 60 + index, -3, 3)}, {0}, tolerance_for(dt));
    }
    ++index;
  }
}

TEST(CrossEntropy, GradcheckOnNonContiguousSpatialLogits) {
  const CeCase& c = kCases[3];
  const mt::Tensor target = mt::from_vector(c.target, target_shape(c.logits));
  // [2, 3, 2, 2] as a permuted view of [2, 2, 2, 3] (channels last in memory).
  mt::Tensor x = random_tensor({2, 2, 2, 3}, mt::kFloat64, 70, -3, 3).permute({0, 3, 1, 2});
  ASSERT_FALSE(x.is_contiguous());
  EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& in) {
    return F::cross_entropy(in[0], target, {c.ignore_index, c.label_smoothing});
  }, {x}));
}

TEST(CrossEntropy, AllTargetsIgnoredGiveNaNAndNoGradient) {
  // PyTorch's mean over zero targets is 0 / 0.
  mt::Tensor x = mt::randn({2, 3}, mt::TensorOptions().requires_grad(true));
  mt::Tensor loss = F::cross_entropy(x, mt::from_vector(std::vector<int64_t>{-100, -100}, {2}));
  EXPECT_TRUE(std::isnan(loss.item<float>()));
  loss.backward();
  EXPECT_EQ(to_doubles(x.grad()), Values(6, 0.0));
}

TEST(CrossEntropy, BadTargetsRaiseErrors) {
  const mt::Tensor x = mt::randn({2, 3, 2, 2});
  auto target = [](std::vector<int64_t> v) { return mt::from_vector(v, {2, 2, 2}); };
  expect_error([&] { F::cross_entropy(x, target({0, 1, 2, 3, 0, 0, 0, 0})); },
               "cross_entropy: target 3 at position 3 is out of range for 3 classes");
  expect_error([&] { F::cross_entropy(x, target({0, 1, 2, 0, 0, -1, 0, 0})); }, "target -1 at position 5");
  // 255 is only allowed when it is the ignore_index.
  expect_error([&] { F::cross_entropy(x, target({255, 1, 2, 0, 0, 0, 0, 0})); }, "target 255");
  EXPECT_NO_THROW(F::cross_entropy(x, target({255, 1, 2, 0, 0, 0, 0, 0}), {255, 0.0}));
  expect_error([&] { F::cross_entropy(x, mt::from_vector(std::vector<int64_t>{0, 1}, {2})); },
               "does not match input [2, 3, 2, 2] float32 cpu (expected target shape [2, 2, 2])");
  expect_error([&] { F::cross_entropy(x, target({0, 1, 2, 0, 0, 0, 0, 0}), {-100, 1.5}); },
               "label_smoothing must be in [0, 1]");
}
