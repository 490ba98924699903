// One copy of layer norm's row kernels (norm_vector.h). MT_VEC_ISA names the copy's namespace;
// the portable copy is this file as the library compiles it, the others are built with -march
// flags by cmake/MixtrainCpuDispatch.cmake.
#include "kernels/cpu/norm_vector.h"

#include <cmath>

#include "kernels/cpu/lane_sum.h"

#ifndef MT_VEC_ISA
#define MT_VEC_ISA vec_generic
#endif

namespace mixtrain::backends::cpu::MT_VEC_ISA {

namespace {

constexpr int kLanes = 8;  // lane_sum's, for the backward's two sums

}  // namespace

void layer_norm_row(float* __restrict y, int64_t n, const float* __restrict x, const float* __restrict weight,
                    const float* __restrict bias, double eps, double* mean, double* rstd) {
  const double mu = lane_sum(n, [&](int64_t j) { return static_cast<double>(x[j]); }) / static_cast<double>(n);
  const double sq = lane_sum(n, [&](int64_t j) {  // two passes: no cancellation when |mean| >> std
    const double d = static_cast<double>(x[j]) - mu;
    return d * d;
  });
  const double rs = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
  *mean = mu;
  *rstd = rs;
  // Normalized with the statistics rounded as they are stored, as the generic rows do.
  const float m = static_cast<float>(mu), r = static_cast<float>(rs);
  for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) * r * weight[j] + bias[j];
}

void layer_norm_row_backward(float* __restrict grad_x, int64_t n, const float* __restrict x,
                             const float* __restrict grad_y, const float* __restrict weight, double mean, double rstd,
                             double* __restrict grad_weight, double* __restrict grad_bias) {
  double sum_dxhat = 0, sum_dxhat_xhat = 0;
  {
    double a[kLanes] = {}, b[kLanes] = {};
    int64_t k = 0;
    for (; k + kLanes <= n; k += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const int64_t j = k + l;
        const double xhat = (static_cast<double>(x[j]) - mean) * rstd, dy = grad_y[j], g = dy * weight[j];
        a[l] += g;
        b[l] += g * xhat;
        grad_weight[j] += dy * xhat;
        grad_bias[j] += dy;
      }
    for (; k < n; ++k) {
      const double xhat = (static_cast<double>(x[k]) - mean) * rstd, dy = grad_y[k], g = dy * weight[k];
      sum_dxhat += g;
      sum_dxhat_xhat += g * xhat;
      grad_weight[k] += dy * xhat;
      grad_bias[k] += dy;
    }
    for (int l = 0; l < kLanes; ++l) sum_dxhat += a[l], sum_dxhat_xhat += b[l];
  }
  if (!grad_x) return;
  // d/dx of (x - mean) * rstd through the row's mean and variance.
  const double mean_dxhat = sum_dxhat / static_cast<double>(n), mean_dxhat_xhat = sum_dxhat_xhat / static_cast<double>(n);
  for (int64_t j = 0; j < n; ++j) {
    const double xhat = (static_cast<double>(x[j]) - mean) * rstd;
    grad_x[j] = static_cast<float>(rstd * (static_cast<double>(grad_y[j]) * weight[j] - mean_dxhat - xhat * mean_dxhat_xhat));
  }
}

}  // namespace mixtrain::backends::cpu::MT_VEC_ISA
