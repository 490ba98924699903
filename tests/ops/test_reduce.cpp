// Reductions (sum, mean, max, min, amax, argmax) against fp64 references written with plain loops, for
// every dtype; gradients against finite differences.
#include <algorithm>
#include <cmath>
#include <utility>

#include "backends/reduce.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::testing::all_close;
using mt::testing::float_types;
using mt::testing::gradcheck;
using mt::testing::poison;
using mt::testing::random_tensor;
using mt::testing::to_doubles;
using mt::testing::tolerance_for;

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

// Max and min pick PyTorch's element: the first NaN when there is one, else the first of equal
// extremes; infinities are values like any other (a column of -inf has max -inf at index 0). The
// reference scans each column by that definition in fp64; the kernel writes into poisoned
// outputs, across columns (inner > 1) and along rows (inner == 1).
TEST(Reduce, MaxMinPickTheFirstNanOrTheFirstExtreme) {
  const double inf = INFINITY, nan = NAN;
  const std::vector<std::vector<double>> columns = {
      {1, 7, 3, 7, 2, 0},          {-inf, -inf, -inf, -inf, -inf, -inf}, {inf, inf, inf, inf, inf, inf},
      {2, nan, 5, nan, 9, 1},      {-inf, -inf, 3, -inf, 3, inf},        {4, 4, 4, 4, 4, nan},
      {0, -inf, -0.5, 8, -inf, 8}, {nan, nan, 1, 2, 3, 4}};
  const int64_t n = 6, cols = static_cast<int64_t>(columns.size());
  auto reference = [&](mt::backends::ReduceOp op) {
    std::vector<double> value, index;
    for (const auto& c : columns) {
      int64_t pick = 0;
      while (pick < n && !std::isnan(c[pick])) ++pick;
      if (pick == n) {
        pick = 0;
        for (int64_t j = 1; j < n; ++j)
          if (op == mt::backends::ReduceOp::Max ? c[j] > c[pick] : c[j] < c[pick]) pick = j;
      }
      value.push_back(c[pick]);
      index.push_back(static_cast<double>(pick));
    }
    return std::make_pair(value, index);
  };
  auto same = [](const std::vector<double>& got, const std::vector<double>& want) {
    for (size_t i = 0; i < want.size(); ++i)
      if (!(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))))
        return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", expected " << want[i];
    return ::testing::AssertionSuccess();
  };
  std::vector<double> by_columns(n * cols), by_rows(n * cols);  // [1, n, cols] and [cols, n, 1]
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t j = 0; j < n; ++j) by_columns[j * cols + c] = by_rows[c * n + j] = columns[c][j];
  for (mt::DType dt : float_types()) {
    for (mt::backends::ReduceOp op : {mt::backends::ReduceOp::Max, mt::backends::ReduceOp::Min}) {
      const auto [want_value, want_index] = reference(op);
      for (bool rows : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dt << (op == mt::backends::ReduceOp::Max ? " max" : " min")
                                          << (rows ? " along rows" : " across columns"));
        const mt::Tensor x = mt::from_vector(rows ? by_rows : by_columns, {rows ? cols : 1, n, rows ? 1 : cols}).to(dt);
        mt::Tensor value = mt::Tensor::empty({rows ? cols : 1, rows ? 1 : cols}, mt::TensorOptions(dt));
        mt::Tensor index = mt::Tensor::empty(value.shape(), mt::TensorOptions(mt::kInt64));
        poison(value);
        poison(index);
        mt::backends::reduce(x, op, x, rows ? cols : 1, n, rows ? 1 : cols, value, index);
        EXPECT_TRUE(same(to_doubles(value), want_value));
        EXPECT_TRUE(same(to_doubles(index), want_index));
      }
    }
  }
}

// amax over several dims against an fp64 reference in every dtype (its values are max's, so every
// dtype is exact), with keepdim and negative dims; NaN propagates.
TEST(Reduce, AmaxOverDimsMatchesReference) {
  for (mt::DType dt : float_types()) {
    const mt::Tensor x = random_tensor({3, 4, 5}, dt, 21, -3, 3);
    const auto v = to_doubles(x);
    std::vector<double> m02(4, -INFINITY), m1(3 * 5, -INFINITY);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j)
        for (int k = 0; k < 5; ++k) {
          const double e = v[(i * 4 + j) * 5 + k];
          m02[j] = std::max(m02[j], e);
          m1[i * 5 + k] = std::max(m1[i * 5 + k], e);
        }
    SCOPED_TRACE(mt::dtype_name(dt));
    const mt::Tensor a = mt::amax(x, {0, -1}), a_keep = mt::amax(x, {2, 0}, true), a1 = mt::amax(x, {1});
    EXPECT_EQ(a.shape(), (mt::Shape{4}));
    EXPECT_EQ(a_keep.shape(), (mt::Shape{1, 4, 1}));
    EXPECT_EQ(a1.shape(), (mt::Shape{3, 5}));
    EXPECT_EQ(a.dtype(), dt);
    EXPECT_EQ(to_doubles(a), m02);
    EXPECT_EQ(to_doubles(a_keep), m02);
    EXPECT_EQ(to_doubles(a1), m1);
    EXPECT_EQ(to_doubles(mt::amax(x)), std::vector<double>{*std::max_element(m02.begin(), m02.end())});
  }
  const mt::Tensor with_nan = mt::from_vector(std::vector<double>{1, NAN, 3, 4, 5, 6}, {2, 3});
  const auto rows = to_doubles(mt::amax(with_nan, {1}));
  EXPECT_TRUE(std::isnan(rows[0]));
  EXPECT_EQ(rows[1], 6.0);
}

// The gradient is shared evenly by equal maxima (PyTorch's amax; max(x, dim) gives it to the
// first), in every dtype; gradcheck in fp64 on a transposed (non-contiguous) input.
TEST(Reduce, AmaxGradientIsSharedByTies) {
  for (mt::DType dt : float_types()) {
    SCOPED_TRACE(mt::dtype_name(dt));
    const mt::Tensor x =
        mt::from_vector(std::vector<double>{1, 3, 3, 2, 0, -1, 5, 5, 5, 5, 5, 5}, {2, 2, 3}).to(dt).set_requires_grad(true);
    mt::sum(mt::amax(x, {1, 2})).backward();
    EXPECT_EQ(x.grad().dtype(), dt);
    const double s = 1.0 / 6;  // rounded once to the dtype
    const std::vector<double> want{0, 0.5, 0.5, 0, 0, 0, s, s, s, s, s, s};
    EXPECT_EQ(to_doubles(x.grad()), to_doubles(mt::from_vector(want, {2, 2, 3}).to(dt)));
  }
  const mt::Tensor x = random_tensor({4, 3}, mt::kFloat64, 22);
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::amax(in[0].t(), {0}, true); }, {x}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return mt::amax(in[0]); }, {x}));
}

TEST(Reduce, AmaxErrorsNameTheOpAndTheShape) {
  const mt::Tensor x = mt::zeros({2, 0, 3});
  mt::testing::expect_error([&] { (void)mt::amax(x, {1}); }, {"amax", "empty dimension", "[2, 0, 3]"});
  mt::testing::expect_error([&] { (void)mt::amax(x); }, {"amax", "[2, 0, 3]"});
  mt::testing::expect_error([&] { (void)mt::amax(mt::zeros({2, 3}), {1, -1}); }, {"amax", "repeats"});
  mt::testing::expect_error([&] { (void)mt::amax(mt::zeros({2, 3}), {2}); }, "amax");
}
