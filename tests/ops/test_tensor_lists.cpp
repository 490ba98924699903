// cat, stack, split and chunk: values against index-mapping references for every dtype and
// several dims, mixed dtypes (type promotion, gradients back in each input's dtype), views,
// gradients (reference derivative and gradcheck with non-contiguous inputs), errors.
#include "ops/op_reference.h"

namespace mt = mixtrain;
using namespace mixtrain::testing;

namespace {

// Concatenation of row-major blocks along dim d: output element (outer, j, inner) comes from the
// input whose range along d holds j.
Values cat_ref(const std::vector<Values>& in, const std::vector<mt::Shape>& shapes, int64_t d) {
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= shapes[0][k];
  for (size_t k = d + 1; k < shapes[0].size(); ++k) inner *= shapes[0][k];
  Values out;
  for (int64_t o = 0; o < outer; ++o)
    for (size_t t = 0; t < in.size(); ++t) {
      const int64_t n = shapes[t][d];
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < inner; ++i) out.push_back(in[t][(o * n + j) * inner + i]);
    }
  return out;
}

}  // namespace

TEST(Cat, ValuesAndGradientsMatchReferenceForEveryDtypeAndDim) {
  for (int64_t d : {0, 1, 2}) {
    std::vector<mt::Shape> shapes(3, mt::Shape{2, 3, 4});
    shapes[1][d] = 1;
    shapes[2][d] = 5;
    for (mt::DType dt : float_types()) {
      std::vector<mt::Tensor> in;
      for (size_t t = 0; t < shapes.size(); ++t) in.push_back(random_tensor(shapes[t], dt, 10 + t));
      auto op = [&](const std::vector<mt::Tensor>& x) { return mt::cat(x, d - 3); };  // negative dims too
      auto ref = [&](const std::vector<Values>& x) { return cat_ref(x, shapes, d); };
      // A copy: exact in every dtype.
      check_op("cat dim " + std::to_string(d) + " " + mt::dtype_name(dt), op, ref, in, {0, 1, 2}, tolerance_for(dt));
    }
  }
  // Non-contiguous inputs are read through their strides.
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& x) { return mt::cat({x[0], x[1]}, 1); },
                        {random_tensor({3, 2}, mt::kFloat64, 1).t(), random_tensor({2, 4}, mt::kFloat64, 2)}));
}

TEST(Cat, MixedDtypesPromoteAndGradientsKeepEachInputsDtype) {
  mt::Tensor a = random_tensor({2, 3}, mt::kFloat16, 3).set_requires_grad(true);
  mt::Tensor b = random_tensor({1, 3}, mt::kFloat32, 4).set_requires_grad(true);
  mt::Tensor c = random_tensor({2, 3}, mt::kBFloat16, 5).set_requires_grad(true);
  mt::Tensor out = mt::cat({a, b, c});
  EXPECT_EQ(out.dtype(), mt::kFloat32);
  EXPECT_EQ(to_doubles(out), cat_ref({to_doubles(a), to_doubles(b), to_doubles(c)}, {{2, 3}, {1, 3}, {2, 3}}, 0));
  mt::Tensor gy = random_tensor(out.shape(), mt::kFloat32, 6);
  out.backward(gy);
  ASSERT_EQ(a.grad().dtype(), mt::kFloat16);
  ASSERT_EQ(b.grad().dtype(), mt::kFloat32);
  ASSERT_EQ(c.grad().dtype(), mt::kBFloat16);
  const Values g = to_doubles(gy);
  EXPECT_EQ(to_doubles(b.grad()), Values(g.begin() + 6, g.begin() + 9));
  // The fp16 gradient is the fp32 one rounded once.
  EXPECT_EQ(to_doubles(a.grad()), to_doubles(mt::from_vector(Values(g.begin(), g.begin() + 6), {2, 3}).to(mt::kFloat16)));
  EXPECT_EQ(mt::cat({mt::from_vector(std::vector<int64_t>{1, 2}, {2}), mt::from_vector(std::vector<int64_t>{3}, {1})})
                .to_vector<int64_t>(),
            (std::vector<int64_t>{1, 2, 3}));
  // A 1-D empty tensor is skipped whatever the others' rank, as PyTorch still allows.
  EXPECT_EQ(mt::cat({mt::zeros({0}), mt::ones({2, 2})}).shape(), (mt::Shape{2, 2}));
}

TEST(Stack, InsertsANewDimAndSplitsTheGradient) {
  for (int64_t d : {0, 1, 2, -1}) {
    for (mt::DType dt : float_types()) {
      std::vector<mt::Tensor> in{random_tensor({2, 3}, dt, 20), random_tensor({2, 3}, dt, 21)};
      const int64_t dd = d < 0 ? d + 3 : d;
      // stack(x, d) is cat of x with a unit dim inserted at d.
      std::vector<mt::Shape> shapes(2, mt::Shape{2, 3});
      for (auto& s : shapes) s.insert(s.begin() + dd, 1);
      auto op = [&](const std::vector<mt::Tensor>& x) { return mt::stack(x, d); };
      auto ref = [&](const std::vector<Values>& x) { return cat_ref(x, shapes, dd); };
      check_op("stack dim " + std::to_string(d) + " " + mt::dtype_name(dt), op, ref, in, {0, 1}, tolerance_for(dt));
    }
  }
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& x) { return mt::stack({x[0], x[1]}, 1); },
                        {random_tensor({3, 2}, mt::kFloat64, 22).t(), random_tensor({2, 3}, mt::kFloat64, 23)}));
}

TEST(Split, PiecesAreViewsWithTheRightSizesAndGradients) {
  const mt::Tensor x = random_tensor({7, 4}, mt::kFloat32, 30);
  const auto pieces = mt::split(x, 3);
  ASSERT_EQ(pieces.size(), 3u);
  const Values xv = to_doubles(x);
  int64_t row = 0;
  for (const mt::Tensor& p : pieces) {
    EXPECT_EQ(p.raw_data(), static_cast<char*>(x.raw_data()) + row * 4 * sizeof(float)) << "a view, not a copy";
    EXPECT_EQ(to_doubles(p), Values(xv.begin() + row * 4, xv.begin() + (row + p.size(0)) * 4));
    row += p.size(0);
  }
  EXPECT_EQ(pieces[2].size(0), 1);
  auto sizes = [](const std::vector<mt::Tensor>& ts, int64_t d) {
    std::vector<int64_t> s;
    for (const auto& t : ts) s.push_back(t.size(d));
    return s;
  };
  EXPECT_EQ(sizes(mt::split(x, {1, 0, 3}, 1), 1), (std::vector<int64_t>{1, 0, 3}));
  EXPECT_EQ(sizes(mt::chunk(x, 3), 0), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(sizes(mt::chunk(x, 2, -1), 1), (std::vector<int64_t>{2, 2}));
  // As in PyTorch, 6 rows in 4 chunks give 3 chunks of 2.
  EXPECT_EQ(sizes(mt::chunk(mt::zeros({6}), 4), 0), (std::vector<int64_t>{2, 2, 2}));
  // Pieces used differently: each gets its own part of the gradient, the unused one zero.
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) {
    auto p = mt::split(in[0], {2, 1, 2}, 1);
    return mt::cat({mt::mul(p[0], 3.0), mt::square(p[2])}, 1);
  }, {random_tensor({5, 3}, mt::kFloat64, 31).t()}));
}

TEST(TensorLists, BadArgumentsRaiseErrorsNamingTheOp) {
  expect_error([] { mt::cat({}); }, "cat: expected a non-empty list");
  expect_error([] { mt::cat({mt::zeros({2, 3}), mt::zeros({2, 4})}); },
               "cat: tensor 1 [2, 4] float32 cpu does not match [2, 3] float32 cpu in every dimension but 0");
  expect_error([] { mt::cat({mt::zeros({2, 3}), mt::zeros({2, 3, 1})}, 1); }, "cat: tensor 1");
  expect_error([] { mt::cat({mt::zeros({2, 3})}, 2); }, "cat");
  expect_error([] { mt::stack({mt::zeros({2, 3}), mt::zeros({3, 2})}); }, "stack: tensor 1 [3, 2] float32 cpu differs");
  expect_error([] { mt::split(mt::zeros({5}), {2, 2}); }, "split: sizes [2, 2] do not add up to 5");
  expect_error([] { mt::split(mt::zeros({5}), 0); }, "split: split_size must be positive");
  expect_error([] { mt::chunk(mt::zeros({5}), 0); }, "chunk: chunks must be positive");
}
