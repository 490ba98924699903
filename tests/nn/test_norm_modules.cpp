// BatchNorm2d, GroupNorm and LayerNorm: PyTorch's names and counts, forward against fp64
// references, running statistics (momentum and cumulative average), train/eval, and batch-norm
// statistics that stay fp32 when the module is cast to half.
#include <cmath>

#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::all_close;
using mt::testing::names_of;
using mt::testing::random_tensor;
using mt::testing::to_doubles;
using mt::testing::tolerance_for;

namespace {

// Per-channel mean and unbiased variance of x [N, C, H, W], fp64 loops.
struct ChannelStats {
  std::vector<double> mean, var_biased, var_unbiased;
};
ChannelStats channel_stats(const Tensor& x) {
  const auto v = to_doubles(x);
  const int64_t n = x.size(0), c = x.size(1), s = x.size(2) * x.size(3);
  ChannelStats st;
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) sum += v[static_cast<size_t>((i * c + ch) * s + j)];
    const double m = sum / static_cast<double>(n * s);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) sq += std::pow(v[static_cast<size_t>((i * c + ch) * s + j)] - m, 2);
    st.mean.push_back(m);
    st.var_biased.push_back(sq / static_cast<double>(n * s));
    st.var_unbiased.push_back(sq / static_cast<double>(n * s - 1));
  }
  return st;
}

// (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c]
std::vector<double> normalize(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& var,
                              const std::vector<double>& w, const std::vector<double>& b, double eps) {
  const auto v = to_doubles(x);
  const int64_t c = x.size(1), s = x.size(2) * x.size(3);
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const auto ch = static_cast<size_t>((static_cast<int64_t>(i) / s) % c);
    out[i] = (v[i] - mean[ch]) / std::sqrt(var[ch] + eps) * w[ch] + b[ch];
  }
  return out;
}

}  // namespace

TEST(BatchNorm2dModule, NamesCountsAndBuffers) {
  mt::nn::BatchNorm2d bn(5);
  EXPECT_EQ(names_of(bn.state_dict()),
            (std::vector<std::string>{"bias", "num_batches_tracked", "running_mean", "running_var", "weight"}));
  EXPECT_EQ(bn.parameters().size(), 2u);
  EXPECT_EQ(bn->running_mean.dtype(), mt::kFloat32);
  EXPECT_EQ(bn->num_batches_tracked.dtype(), mt::kInt64);
  EXPECT_EQ(bn->num_batches_tracked.dim(), 0);
  EXPECT_EQ(to_doubles(bn->running_var), std::vector<double>(5, 1.0));

  mt::nn::BatchNorm2d bare(mt::nn::BatchNormOptions(5).affine(false).track_running_stats(false));
  EXPECT_TRUE(bare.state_dict().empty());
}

TEST(BatchNorm2dModule, TrainingUsesBatchStatsAndUpdatesRunningOnes) {
  mt::nn::BatchNorm2d bn(3);
  {
    mt::NoGradGuard g;
    bn->weight.copy_(mt::from_vector(std::vector<float>{0.5f, 2.f, -1.f}, {3}));
    bn->bias.copy_(mt::from_vector(std::vector<float>{0.1f, 0.f, 0.3f}, {3}));
  }
  const Tensor x = random_tensor({4, 3, 5, 6}, mt::kFloat32, 11, -2, 3);
  const ChannelStats st = channel_stats(x);
  const Tensor y = bn(x);
  EXPECT_TRUE(all_close(y, normalize(x, st.mean, st.var_biased, to_doubles(bn->weight), to_doubles(bn->bias), 1e-5),
                        tolerance_for(mt::kFloat32)));
  std::vector<double> rm, rv;
  for (int c = 0; c < 3; ++c) {
    rm.push_back(0.1 * st.mean[c]);
    rv.push_back(0.9 + 0.1 * st.var_unbiased[c]);
  }
  EXPECT_TRUE(all_close(bn->running_mean, rm, tolerance_for(mt::kFloat32)));
  EXPECT_TRUE(all_close(bn->running_var, rv, tolerance_for(mt::kFloat32)));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);

  // Eval: the running statistics, and they no longer move.
  bn.eval();
  const Tensor x2 = random_tensor({2, 3, 4, 4}, mt::kFloat32, 12);
  EXPECT_TRUE(all_close(bn(x2), normalize(x2, rm, rv, to_doubles(bn->weight), to_doubles(bn->bias), 1e-5),
                        tolerance_for(mt::kFloat32)));
  EXPECT_TRUE(all_close(bn->running_mean, rm, tolerance_for(mt::kFloat32)));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
}

TEST(BatchNorm2dModule, CumulativeAverageWithoutMomentum) {
  mt::nn::BatchNorm2d bn(mt::nn::BatchNormOptions(2).momentum(std::nullopt));
  const Tensor a = random_tensor({2, 2, 3, 3}, mt::kFloat32, 13), b = random_tensor({2, 2, 3, 3}, mt::kFloat32, 14, 0, 4);
  bn(a);
  bn(b);
  const ChannelStats sa = channel_stats(a), sb = channel_stats(b);
  // Momentum 1 then 1/2: the plain average of the two batches' statistics.
  EXPECT_TRUE(all_close(bn->running_mean, {(sa.mean[0] + sb.mean[0]) / 2, (sa.mean[1] + sb.mean[1]) / 2},
                        tolerance_for(mt::kFloat32)));
  EXPECT_TRUE(all_close(bn->running_var,
                        {(sa.var_unbiased[0] + sb.var_unbiased[0]) / 2, (sa.var_unbiased[1] + sb.var_unbiased[1]) / 2},
                        tolerance_for(mt::kFloat32)));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);

  // A loaded count carries on from where it was.
  mt::nn::BatchNorm2d loaded(mt::nn::BatchNormOptions(2).momentum(std::nullopt));
  loaded(b);
  loaded.load_state_dict(bn.state_dict());
  loaded(a);
  EXPECT_EQ(loaded->num_batches_tracked.item<int64_t>(), 3);
  // Momentum 1/3: the average of the three batches' means.
  EXPECT_TRUE(all_close(loaded->running_mean,
                        {(2 * sa.mean[0] + sb.mean[0]) / 3, (2 * sa.mean[1] + sb.mean[1]) / 3},
                        tolerance_for(mt::kFloat32)));
}

TEST(BatchNorm2dModule, RunningStatsStayFp32WhenModuleIsHalf) {
  for (mt::DType half : {mt::kFloat16, mt::kBFloat16}) {
    SCOPED_TRACE(mt::dtype_name(half));
    mt::nn::BatchNorm2d bn(4);
    bn.to(half);
    EXPECT_EQ(bn->weight.dtype(), half);
    EXPECT_EQ(bn->running_mean.dtype(), mt::kFloat32);
    EXPECT_EQ(bn->running_var.dtype(), mt::kFloat32);
    EXPECT_EQ(bn->num_batches_tracked.dtype(), mt::kInt64);
    const Tensor x = random_tensor({3, 4, 4, 4}, half, 15, 0, 2);
    const Tensor y = bn(x);
    EXPECT_EQ(y.dtype(), half);
    const ChannelStats st = channel_stats(x);
    std::vector<double> rm;
    for (double m : st.mean) rm.push_back(0.1 * m);
    // fp32 statistics of the half input: only the fp32 accumulation error remains.
    EXPECT_TRUE(all_close(bn->running_mean, rm, tolerance_for(mt::kFloat32)));
  }
  mt::nn::BatchNorm2d wide(2);
  wide.to(mt::kFloat64);
  EXPECT_EQ(wide->running_mean.dtype(), mt::kFloat64);
}

TEST(BatchNorm2dModule, EvalWithoutRunningStatsUsesBatchStats) {
  mt::nn::BatchNorm2d bn(mt::nn::BatchNormOptions(2).track_running_stats(false));
  bn.eval();
  const Tensor x = random_tensor({2, 2, 3, 3}, mt::kFloat32, 16);
  const ChannelStats st = channel_stats(x);
  EXPECT_TRUE(all_close(bn(x), normalize(x, st.mean, st.var_biased, {1, 1}, {0, 0}, 1e-5), tolerance_for(mt::kFloat32)));
}

TEST(BatchNorm2dModule, RejectsBadInput) {
  mt::nn::BatchNorm2d bn(3);
  EXPECT_THROW(bn(mt::zeros({2, 4, 3, 3})), mt::Error);
  EXPECT_THROW(bn(mt::zeros({2, 3, 3})), mt::Error);
  EXPECT_THROW(mt::nn::BatchNorm2d(mt::nn::BatchNormOptions(3).momentum(1.5)), mt::Error);
}

TEST(GroupNormModule, MatchesFp64Reference) {
  mt::nn::GroupNorm gn(2, 4);
  EXPECT_EQ(names_of(gn.state_dict()), (std::vector<std::string>{"bias", "weight"}));
  {
    mt::NoGradGuard g;
    gn->weight.copy_(mt::from_vector(std::vector<float>{1.f, 2.f, 3.f, 4.f}, {4}));
  }
  const Tensor x = random_tensor({2, 4, 3, 3}, mt::kFloat32, 17, -1, 2);
  const auto v = to_doubles(x);
  std::vector<double> ref(v.size());
  const int64_t group = 2 * 9;  // two channels of 3x3 per group
  for (size_t g0 = 0; g0 < v.size(); g0 += group) {
    double m = 0, var = 0;
    for (int64_t i = 0; i < group; ++i) m += v[g0 + i];
    m /= group;
    for (int64_t i = 0; i < group; ++i) var += std::pow(v[g0 + i] - m, 2);
    var /= group;
    for (int64_t i = 0; i < group; ++i) {
      const size_t idx = g0 + static_cast<size_t>(i);
      const double w = static_cast<double>((idx / 9) % 4 + 1);
      ref[idx] = (v[idx] - m) / std::sqrt(var + 1e-5) * w;
    }
  }
  EXPECT_TRUE(all_close(gn(x), ref, tolerance_for(mt::kFloat32)));
  EXPECT_THROW(mt::nn::GroupNorm(3, 4), mt::Error);
}

TEST(LayerNormModule, MatchesFp64Reference) {
  mt::nn::LayerNorm ln(mt::Shape{6});
  EXPECT_EQ(names_of(ln.state_dict()), (std::vector<std::string>{"bias", "weight"}));
  EXPECT_EQ(ln->weight.shape(), (mt::Shape{6}));
  const Tensor x = random_tensor({2, 3, 6}, mt::kFloat32, 18, -3, 1);
  const auto v = to_doubles(x);
  std::vector<double> ref(v.size());
  for (size_t r = 0; r < v.size(); r += 6) {
    double m = 0, var = 0;
    for (size_t i = 0; i < 6; ++i) m += v[r + i] / 6;
    for (size_t i = 0; i < 6; ++i) var += std::pow(v[r + i] - m, 2) / 6;
    for (size_t i = 0; i < 6; ++i) ref[r + i] = (v[r + i] - m) / std::sqrt(var + 1e-5);
  }
  EXPECT_TRUE(all_close(ln(x), ref, tolerance_for(mt::kFloat32)));
  EXPECT_EQ(to_doubles(ln(x)), to_doubles(mt::nn::functional::layer_norm(x, {6}, ln->weight, ln->bias)));

  mt::nn::LayerNorm no_bias(mt::nn::LayerNormOptions({3, 6}).bias(false));
  EXPECT_EQ(names_of(no_bias.state_dict()), std::vector<std::string>{"weight"});
  EXPECT_THROW(ln(mt::zeros({2, 5})), mt::Error);
}
