// batch_norm (training and eval, running statistics), group_norm and layer_norm against fp64
// loops for every dtype, including half inputs with fp32 parameters; statistics accuracy for half
// inputs far from zero; gradients against the reference's numerical derivative and gradcheck in
// fp64 (non-contiguous input); poisoned kernel outputs; errors.
#include <cmath>

#include "backends/all_kernels.h"
#include "ops/op_reference.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using namespace mixtrain::testing;

namespace {

// Normalizes x viewed as [outer, c, s] over the element sets `group_of` assigns (each set gets
// its own mean and biased variance), then applies per-channel weight and bias.
struct NormRef {
  int64_t outer, c, s;
  double eps;
  bool affine;
  // The statistics group of element (o, ch, k).
  std::function<int64_t(int64_t, int64_t, int64_t)> group_of;
  int64_t groups;

  Values operator()(const std::vector<Values>& in) const {
    const Values& x = in[0];
    Values sum(groups, 0.0), sq(groups, 0.0), count(groups, 0.0);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t k = 0; k < s; ++k) {
          const int64_t g = group_of(o, ch, k);
          sum[g] += x[(o * c + ch) * s + k];
          count[g] += 1;
        }
    for (int64_t g = 0; g < groups; ++g) sum[g] /= count[g];  // now the mean
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t k = 0; k < s; ++k) {
          const int64_t g = group_of(o, ch, k);
          const double d = x[(o * c + ch) * s + k] - sum[g];
          sq[g] += d * d;
        }
    Values y(x.size());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t k = 0; k < s; ++k) {
          const int64_t g = group_of(o, ch, k), i = (o * c + ch) * s + k;
          const double xhat = (x[i] - sum[g]) / std::sqrt(sq[g] / count[g] + eps);
          y[i] = affine ? xhat * in[1][ch] + in[2][ch] : xhat;
        }
    return y;
  }
};

NormRef batch_norm_ref(int64_t n, int64_t c, int64_t s, double eps, bool affine) {
  return {n, c, s, eps, affine, [](int64_t, int64_t ch, int64_t) { return ch; }, c};
}
NormRef group_norm_ref(int64_t n, int64_t c, int64_t s, int64_t groups, double eps, bool affine = true) {
  const int64_t cg = c / groups;
  return {n, c, s, eps, affine, [=](int64_t o, int64_t ch, int64_t) { return o * groups + ch / cg; }, n * groups};
}
// layer_norm over the last dim of [rows, cols]: viewed as [rows, cols, 1], one group per row.
NormRef layer_norm_ref(int64_t rows, int64_t cols, double eps, bool affine = true) {
  return {rows, cols, 1, eps, affine, [](int64_t o, int64_t, int64_t) { return o; }, rows};
}

// Eval-mode batch norm with fixed statistics.
Values batch_norm_eval_ref(const std::vector<Values>& in, int64_t n, int64_t c, int64_t s, const Values& rm,
                           const Values& rv, double eps) {
  Values y(in[0].size());
  for (int64_t o = 0; o < n; ++o)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t k = 0; k < s; ++k) {
        const int64_t i = (o * c + ch) * s + k;
        y[i] = (in[0][i] - rm[ch]) / std::sqrt(rv[ch] + eps) * in[1][ch] + in[2][ch];
      }
  return y;
}

// Parameters in the input's dtype, and fp32 ones for half inputs (a half model's fp32 norms).
std::vector<mt::DType> param_types(mt::DType dt) {
  if (mt::is_half(dt)) return {dt, mt::kFloat32};
  return {dt};
}

}  // namespace

TEST(BatchNorm, TrainingForwardBackwardAndRunningStatsMatchReference) {
  const int64_t n = 3, c = 4, h = 3, w = 2, s = h * w;
  const double eps = 1e-5, momentum = 0.2;
  for (mt::DType dt : float_types()) {
    for (mt::DType pt : param_types(dt)) {
      const std::string what = std::string(mt::dtype_name(dt)) + " params " + mt::dtype_name(pt);
      mt::Tensor rm = random_tensor({c}, mt::kFloat32, 3), rv = random_tensor({c}, mt::kFloat32, 4, 0.5, 2.0);
      const Values rm0 = to_doubles(rm), rv0 = to_doubles(rv);
      const mt::Tensor x = random_tensor({n, c, h, w}, dt, 5, -2, 3);
      auto op = [&](const std::vector<mt::Tensor>& in) {
        return F::batch_norm(in[0], rm, rv, in[1], in[2], /*training=*/true, momentum, eps);
      };
      check_op("batch_norm train " + what, op, batch_norm_ref(n, c, s, eps, true),
               {x, random_tensor({c}, pt, 6), random_tensor({c}, pt, 7)}, {0, 1, 2}, tolerance_for(dt));
      // Running statistics: fp32 buffers stay fp32 and are as accurate as fp32 allows, also for
      // half inputs (the batch statistics behind them are computed in fp32 or better).
      const Values xv = to_doubles(x);
      Values mean(c, 0), var(c, 0);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t k = 0; k < s; ++k) mean[ch] += xv[(i * c + ch) * s + k] / (n * s);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t k = 0; k < s; ++k) var[ch] += std::pow(xv[(i * c + ch) * s + k] - mean[ch], 2) / (n * s - 1);
      Values rm1(c), rv1(c);
      for (int64_t ch = 0; ch < c; ++ch) {
        rm1[ch] = (1 - momentum) * rm0[ch] + momentum * mean[ch];
        rv1[ch] = (1 - momentum) * rv0[ch] + momentum * var[ch];
      }
      EXPECT_EQ(rm.dtype(), mt::kFloat32);
      EXPECT_TRUE(all_close(rm, rm1, tolerance_for(mt::kFloat32))) << what;
      EXPECT_TRUE(all_close(rv, rv1, tolerance_for(mt::kFloat32))) << what;
    }
  }
}

TEST(BatchNorm, EvalUsesRunningStatsAndLeavesThemAlone) {
  const int64_t n = 2, c = 3, s = 5;
  const double eps = 1e-3;
  for (mt::DType dt : float_types()) {
    const mt::Tensor rm = random_tensor({c}, mt::kFloat32, 8), rv = random_tensor({c}, mt::kFloat32, 9, 0.5, 2.0);
    const Values rmv = to_doubles(rm), rvv = to_doubles(rv);
    auto op = [&](const std::vector<mt::Tensor>& in) {
      return F::batch_norm(in[0], rm, rv, in[1], in[2], /*training=*/false, 0.1, eps);
    };
    auto ref = [&](const std::vector<Values>& in) { return batch_norm_eval_ref(in, n, c, s, rmv, rvv, eps); };
    check_op(std::string("batch_norm eval ") + mt::dtype_name(dt), op, ref,
             {random_tensor({n, c, s}, dt, 10), random_tensor({c}, dt, 11), random_tensor({c}, dt, 12)}, {0, 1, 2},
             tolerance_for(dt));
    EXPECT_EQ(to_doubles(rm), rmv);
    EXPECT_EQ(to_doubles(rv), rvv);
  }
}

TEST(BatchNorm, GradcheckTrainingAndEvalWithNonContiguousInput) {
  mt::Tensor x = random_tensor({3, 2, 4, 3}, mt::kFloat64, 13).transpose(1, 3);  // [3, 3, 4, 2]
  ASSERT_FALSE(x.is_contiguous());
  for (bool training : {true, false}) {
    mt::Tensor rm = random_tensor({3}, mt::kFloat64, 14), rv = random_tensor({3}, mt::kFloat64, 15, 0.5, 2);
    EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& in) {
      // Fresh buffers per call: training updates them, and gradcheck calls fn many times.
      mt::Tensor m = rm.clone(), v = rv.clone();
      return F::batch_norm(in[0], m, v, in[1], in[2], training, 0.1, 1e-5);
    }, {x, random_tensor({3}, mt::kFloat64, 16), random_tensor({3}, mt::kFloat64, 17)})) << training;
  }
  // Without affine parameters and without running statistics (training only).
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return F::batch_norm(in[0], {}, {}, {}, {}, true); },
                        {random_tensor({4, 2}, mt::kFloat64, 18)}));
}

TEST(GroupNorm, ForwardBackwardMatchReferenceAndGradcheck) {
  const int64_t n = 2, c = 6, h = 2, w = 3, groups = 3;
  for (mt::DType dt : float_types()) {
    for (mt::DType pt : param_types(dt)) {
      auto op = [&](const std::vector<mt::Tensor>& in) { return F::group_norm(in[0], groups, in[1], in[2], 1e-5); };
      check_op(std::string("group_norm ") + mt::dtype_name(dt) + " params " + mt::dtype_name(pt), op,
               group_norm_ref(n, c, h * w, groups, 1e-5),
               {random_tensor({n, c, h, w}, dt, 20, -1, 2), random_tensor({c}, pt, 21), random_tensor({c}, pt, 22)},
               {0, 1, 2}, tolerance_for(dt));
    }
  }
  mt::Tensor x = random_tensor({n, c, w, h}, mt::kFloat64, 23).transpose(2, 3);
  EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& in) { return F::group_norm(in[0], groups, in[1], in[2]); },
                        {x, random_tensor({c}, mt::kFloat64, 24), random_tensor({c}, mt::kFloat64, 25)}));
}

TEST(LayerNorm, ForwardBackwardMatchReferenceAndGradcheck) {
  for (mt::DType dt : float_types()) {
    for (mt::DType pt : param_types(dt)) {
      // [2, 3, 4, 5] normalized over its last two dims: 6 rows of 20.
      auto op = [&](const std::vector<mt::Tensor>& in) { return F::layer_norm(in[0], {4, 5}, in[1], in[2], 1e-5); };
      check_op(std::string("layer_norm ") + mt::dtype_name(dt) + " params " + mt::dtype_name(pt), op,
               layer_norm_ref(6, 20, 1e-5),
               {random_tensor({2, 3, 4, 5}, dt, 30, -1, 2), random_tensor({4, 5}, pt, 31), random_tensor({4, 5}, pt, 32)},
               {0, 1, 2}, tolerance_for(dt));
    }
  }
  mt::Tensor x = random_tensor({5, 3}, mt::kFloat64, 33).t();  // [3, 5], non-contiguous
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return F::layer_norm(in[0], {5}, in[1], in[2]); },
                        {x, random_tensor({5}, mt::kFloat64, 34), random_tensor({5}, mt::kFloat64, 35)}));
  EXPECT_TRUE(gradcheck([](const std::vector<mt::Tensor>& in) { return F::layer_norm(in[0], {5}); }, {x}));
}

TEST(Norms, HalfInputsFarFromZeroKeepFp32Statistics) {
  // 512 values around 300: in fp16 their sum (~153600) overflows and their variance (~0.3 for
  // [299, 301)) is below the fp16 spacing of the mean; bf16 (spacing 2 there, so [280, 320) to
  // keep some spread) would lose every digit of the variance. Statistics computed in fp32 (or
  // better) give the fp64 reference's output.
  for (mt::DType dt : {mt::kFloat16, mt::kBFloat16}) {
    const double half_width = dt == mt::kFloat16 ? 1.0 : 20.0;
    const mt::Tensor x = random_tensor({2, 4, 128}, dt, 40, 300 - half_width, 300 + half_width);
    EXPECT_TRUE(all_close(F::layer_norm(x, {4, 128}), layer_norm_ref(2, 512, 1e-5, false)({to_doubles(x)}), tolerance_for(dt)))
        << dt;
    EXPECT_TRUE(all_close(F::group_norm(x, 2), group_norm_ref(2, 4, 128, 2, 1e-5, false)({to_doubles(x)}), tolerance_for(dt)))
        << dt;
    mt::Tensor rm = mt::zeros({4}), rv = mt::ones({4});
    EXPECT_TRUE(all_close(F::batch_norm(x, rm, rv, {}, {}, true), batch_norm_ref(2, 4, 128, 1e-5, false)({to_doubles(x)}),
                          tolerance_for(dt)))
        << dt;
  }
}

TEST(Norms, KernelsWriteEveryOutputElement) {
  const mt::DeviceType cpu = mt::DeviceType::CPU;
  for (mt::DType dt : float_types()) {
    const mt::DType st = dt == mt::kFloat64 ? mt::kFloat64 : mt::kFloat32;
    const mt::Tensor x = random_tensor({2, 4, 3}, dt, 50), w = random_tensor({4}, dt, 51), b = random_tensor({4}, dt, 52);
    mt::Tensor mean = poisoned({4}, st), invstd = poisoned({4}, st), out = poisoned(x.shape(), dt);
    mt::backends::batch_norm_stats(cpu, x, 2, 4, 3, 1e-5, mean, invstd, {}, {}, 0.1);
    mt::backends::batch_norm(cpu, x, 2, 4, 3, mean, invstd, w, b, out);
    mt::Tensor gx = poisoned(x.shape(), dt), gw = poisoned({4}, dt), gb = poisoned({4}, dt);
    mt::backends::batch_norm_backward(cpu, x, out, 2, 4, 3, mean, invstd, w, true, gx, gw, gb);
    for (const mt::Tensor& t : {mean, invstd, out, gx, gw, gb}) EXPECT_TRUE(all_finite(t)) << dt;

    mt::Tensor gm = poisoned({2, 2}, st), gr = poisoned({2, 2}, st), gout = poisoned(x.shape(), dt);
    mt::backends::group_norm(cpu, x, 2, 4, 3, 2, 1e-5, w, b, gout, gm, gr);
    mt::Tensor ggx = poisoned(x.shape(), dt), ggw = poisoned({4}, dt), ggb = poisoned({4}, dt);
    mt::backends::group_norm_backward(cpu, x, gout, 2, 4, 3, 2, gm, gr, w, ggx, ggw, ggb);
    for (const mt::Tensor& t : {gm, gr, gout, ggx, ggw, ggb}) EXPECT_TRUE(all_finite(t)) << dt;

    const mt::Tensor lw = random_tensor({3}, dt, 53), lb = random_tensor({3}, dt, 54);
    mt::Tensor lm = poisoned({8}, st), lr = poisoned({8}, st), lout = poisoned(x.shape(), dt);
    mt::backends::layer_norm(cpu, x, 8, 3, 1e-5, lw, lb, lout, lm, lr);
    mt::Tensor lgx = poisoned(x.shape(), dt), lgw = poisoned({3}, dt), lgb = poisoned({3}, dt);
    mt::backends::layer_norm_backward(cpu, x, lout, 8, 3, lm, lr, lw, lgx, lgw, lgb);
    for (const mt::Tensor& t : {lm, lr, lout, lgx, lgw, lgb}) EXPECT_TRUE(all_finite(t)) << dt;
  }
}

TEST(Norms, BadArgumentsRaiseErrorsNamingTheOp) {
  const mt::Tensor x = mt::randn({2, 4, 3, 3}), rm = mt::zeros({4}), rv = mt::ones({4});
  expect_error([&] { F::batch_norm(x, rm, rv, mt::ones({3})); }, "batch_norm: weight [3] float32 cpu must have shape [4]");
  expect_error([&] { F::batch_norm(x, {}, {}, {}, {}, false); }, "running_mean and running_var are needed");
  expect_error([&] { F::batch_norm(mt::randn({1, 4}), rm, rv, {}, {}, true); }, "more than 1 value per channel");
  expect_error([&] { F::batch_norm(x, mt::zeros({3}), rv); }, "batch_norm: running statistics [3]");
  expect_error([&] { F::batch_norm(x, rm, mt::ones({4}, mt::TensorOptions().requires_grad(true)), {}, {}, true); },
               "cannot require grad");
  expect_error([&] { F::batch_norm(x, rm, rv, mt::ones({4}, mt::kFloat16)); }, "must have the input's dtype float32");
  expect_error([&] { F::group_norm(x, 3); }, "group_norm: 4 channels of input [2, 4, 3, 3] float32 cpu cannot be split");
  expect_error([&] { F::layer_norm(x, {4, 3}); }, "layer_norm: normalized_shape [4, 3] does not match");
  expect_error([&] { F::layer_norm(x, {3}, mt::ones({4})); }, "layer_norm: weight [4] float32 cpu must have shape [3]");
  expect_error([&] { F::layer_norm(x.to(mt::kInt64), {3}); }, "layer_norm: expected a floating tensor");
}
