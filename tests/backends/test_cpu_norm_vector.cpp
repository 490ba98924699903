// Layer norm's vector rows (kernels/cpu/norm_vector.h): every copy this CPU runs (generic,
// AVX2, AVX-512) against fp64 on random rows, odd lengths (vector tails), a mean far above the
// spread (the two-pass variance), into poisoned outputs, the affine gradients added to what the
// caller's partial sums already hold. The op itself on every dtype is tests/ops/test_norm.cpp's.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/norm_vector.h"

namespace cpu = mixtrain::backends::cpu;

namespace {

struct Row {
  std::vector<float> x, dy, w, b;
};

Row random_row(int64_t n, double offset, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Row r;
  for (int64_t i = 0; i < n; ++i) {
    r.x.push_back(static_cast<float>(offset) + 3.0f * d(rng));
    r.dy.push_back(d(rng));
    r.w.push_back(1.0f + 0.5f * d(rng));
    r.b.push_back(d(rng));
  }
  return r;
}

bool close(double got, double want, double scale) { return std::abs(got - want) <= 2e-5 * (std::abs(want) + scale); }

TEST(CpuNormVector, EveryCopyMatchesFp64LayerNormForwardAndBackward) {
  const auto copies = cpu::norm_vector_copies();
  ASSERT_FALSE(copies.empty());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const double eps = 1e-5;
  for (const auto& copy : copies) {
    for (int64_t n : {1, 7, 8, 33, 1001}) {
      for (double offset : {0.0, 1000.0}) {
        SCOPED_TRACE(std::string(copy.isa) + " n " + std::to_string(n) + " offset " + std::to_string(offset));
        const Row r = random_row(n, offset, 11 + n);
        // fp64 reference.
        double mu = 0, var = 0;
        for (float v : r.x) mu += v;
        mu /= n;
        for (float v : r.x) var += (v - mu) * (v - mu);
        var /= n;
        const double rs = 1.0 / std::sqrt(var + eps);
        std::vector<double> xhat(n), dxhat(n);
        double mean_dxhat = 0, mean_dxhat_xhat = 0;
        for (int64_t j = 0; j < n; ++j) {
          xhat[j] = (r.x[j] - mu) * rs;
          dxhat[j] = static_cast<double>(r.dy[j]) * r.w[j];
          mean_dxhat += dxhat[j] / n;
          mean_dxhat_xhat += dxhat[j] * xhat[j] / n;
        }

        std::vector<float> y(n, nan), dx(n, nan);
        double mean = nan, rstd = nan;
        copy.forward(y.data(), n, r.x.data(), r.w.data(), r.b.data(), eps, &mean, &rstd);
        EXPECT_TRUE(close(mean, mu, 1e-3 * std::abs(mu) + 1.0)) << mean << " vs " << mu;
        EXPECT_TRUE(close(rstd, rs, 0.0)) << rstd << " vs " << rs;
        std::vector<double> gw(n, 0.25), gb(n, -0.5);  // partial sums already held
        copy.backward(dx.data(), n, r.x.data(), r.dy.data(), r.w.data(), mean, rstd, gw.data(), gb.data());
        for (int64_t j = 0; j < n; ++j) {
          const double want_y = xhat[j] * r.w[j] + r.b[j];
          ASSERT_TRUE(close(y[j], want_y, 1.0)) << "y[" << j << "] = " << y[j] << ", fp64 " << want_y;
          const double want_dx = rs * (dxhat[j] - mean_dxhat - xhat[j] * mean_dxhat_xhat);
          ASSERT_TRUE(close(dx[j], want_dx, rs)) << "dx[" << j << "] = " << dx[j] << ", fp64 " << want_dx;
          ASSERT_TRUE(close(gw[j], 0.25 + r.dy[j] * xhat[j], 1.0)) << "grad_weight[" << j << "]";
          ASSERT_TRUE(close(gb[j], -0.5 + r.dy[j], 1.0)) << "grad_bias[" << j << "]";
        }
        // Without grad_x the affine sums still add up, and nothing is written through null.
        std::vector<double> gw2(n, 0.0), gb2(n, 0.0);
        copy.backward(nullptr, n, r.x.data(), r.dy.data(), r.w.data(), mean, rstd, gw2.data(), gb2.data());
        for (int64_t j = 0; j < n; ++j) ASSERT_NEAR(gw2[j], gw[j] - 0.25, 1e-9 * (1 + std::abs(gw[j])));
      }
    }
  }
}

// Results do not depend on the CPU: every copy gives the portable copy's bits (same order of
// sums, no fused multiply-adds).
TEST(CpuNormVector, EveryCopyGivesThePortableCopysBits) {
  const auto copies = cpu::norm_vector_copies();
  if (copies.size() < 2) GTEST_SKIP() << "this CPU runs only the portable copy: nothing to compare it with";
  for (int64_t n : {5, 64, 1001}) {
    const Row r = random_row(n, 10.0, 29 + n);
    std::vector<std::vector<float>> ys, dxs;
    std::vector<std::vector<double>> gws, stats;
    for (const auto& copy : copies) {
      std::vector<float> y(n), dx(n);
      std::vector<double> gw(n, 0.0), gb(n, 0.0), st(2);
      copy.forward(y.data(), n, r.x.data(), r.w.data(), r.b.data(), 1e-5, &st[0], &st[1]);
      copy.backward(dx.data(), n, r.x.data(), r.dy.data(), r.w.data(), st[0], st[1], gw.data(), gb.data());
      ys.push_back(y), dxs.push_back(dx), gws.push_back(gw), stats.push_back(st);
    }
    for (size_t c = 1; c < copies.size(); ++c) {
      EXPECT_EQ(ys[c], ys[0]) << copies[c].isa << " n " << n;
      EXPECT_EQ(dxs[c], dxs[0]) << copies[c].isa << " n " << n;
      EXPECT_EQ(gws[c], gws[0]) << copies[c].isa << " n " << n;
      EXPECT_EQ(stats[c], stats[0]) << copies[c].isa << " n " << n;
    }
  }
}

// A NaN in a row makes that row's statistics and outputs NaN (no silent clamping), and the next
// row is untouched by it.
TEST(CpuNormVector, EveryCopyPropagatesNan) {
  for (const auto& copy : cpu::norm_vector_copies()) {
    const int64_t n = 19;
    Row r = random_row(n, 0.0, 3);
    r.x[5] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> y(n, 0.0f);
    double mean = 0, rstd = 0;
    copy.forward(y.data(), n, r.x.data(), r.w.data(), r.b.data(), 1e-5, &mean, &rstd);
    EXPECT_TRUE(std::isnan(mean)) << copy.isa;
    for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(y[j])) << copy.isa << " y[" << j << "]";
  }
}

}  // namespace
