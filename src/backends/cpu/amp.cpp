// The CPU kernels of amp::GradScaler: the fused non-finite check + unscale over a list of
// gradients, and the scale update. The list is cut into fixed chunks (as multi_tensor_apply
// does on the GPU) and all chunks of all tensors run in one OpenMP loop, so many small
// gradients cost one parallel region, not one each. The reductions (any non-finite, max |g|,
// counts) are exact, so results do not depend on the thread count.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "backends/amp.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "mixtrain/base/half.h"

namespace mixtrain::backends::cpu {

namespace {

constexpr int64_t kChunk = 1 << 16;  // elements per work item
constexpr int64_t kBlock = 2048;     // elements converted at a time for half types
constexpr float kFp16MinNormal = 6.103515625e-05f;  // 2^-14

struct Partial {
  int nonfinite = 0;
  float max_abs = 0.0f;
  int64_t zeros = 0;
  int64_t subnormal = 0;
};

// Scans x[0, n) (as float), writes y = x * inv when y is given, and accumulates into p. The
// branch-free bodies vectorize: a comparison that is false for NaN catches inf and NaN at once;
// the statistics keep 16 independent lanes (max and counts) so their reductions vectorize too.
// Both the gradient and the unscaled value are checked: a finite gradient times a huge inverse
// scale can overflow (docs/GRAD_SCALER.md, "The scale floor"), and that step must be skipped too.
template <bool Write>
inline void scan_check(const float* x, float* y, int64_t n, float inv, Partial& p) {
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = v * inv;
    bad |= static_cast<int>(!(std::fabs(v) <= FLT_MAX)) | static_cast<int>(!(std::fabs(u) <= FLT_MAX));
    if constexpr (Write) y[i] = u;
  }
  p.nonfinite |= bad;
}

template <bool Write>
inline void scan_stats(const float* x, float* y, int64_t n, float inv, Partial& p) {
  constexpr int L = 16;
  int bad[L] = {};
  float mx[L] = {};
  int32_t zeros[L] = {}, sub[L] = {};
  auto body = [&](int64_t i, int j) {
    const float v = x[i];
    const float a = std::fabs(v);
    const bool finite = a <= FLT_MAX;
    const float u = v * inv;
    bad[j] |= static_cast<int>(!finite) | static_cast<int>(!(std::fabs(u) <= FLT_MAX));
    if constexpr (Write) y[i] = u;
    const float fa = finite ? a : 0.0f;
    mx[j] = fa > mx[j] ? fa : mx[j];
    zeros[j] += v == 0.0f;
    sub[j] += (a > 0.0f) & (a < kFp16MinNormal);
  };
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) body(i + j, j);
  for (; i < n; ++i) body(i, 0);
  for (int j = 0; j < L; ++j) {
    p.nonfinite |= bad[j];
    p.max_abs = std::max(p.max_abs, mx[j]);
    p.zeros += zeros[j];
    p.subnormal += sub[j];
  }
}

template <bool Stats>
inline void scan(const float* x, float* y, int64_t n, float inv, Partial& p) {
  if constexpr (Stats) {
    if (y) scan_stats<true>(x, y, n, inv, p);
    else scan_stats<false>(x, y, n, inv, p);
  } else {
    if (y) scan_check<true>(x, y, n, inv, p);
    else scan_check<false>(x, y, n, inv, p);
  }
}

template <bool Stats>
inline void scan_double(const double* x, double* y, int64_t n, double inv, Partial& p) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double a = std::fabs(v);
    const bool finite = a <= DBL_MAX;
    const double u = v * inv;
    p.nonfinite |= static_cast<int>(!finite) | static_cast<int>(!(std::fabs(u) <= DBL_MAX));
    if (y) y[i] = u;
    if constexpr (Stats) {
      const float fa = finite ? static_cast<float>(std::min(a, static_cast<double>(FLT_MAX))) : 0.0f;
      p.max_abs = std::max(p.max_abs, fa);
      p.zeros += v == 0.0;
      p.subnormal += (a > 0.0) & (a < kFp16MinNormal);
    }
  }
}

void to_float(DType dt, const void* src, float* dst, int64_t n) {
  if (dt == kFloat16) half_to_float_array(static_cast<const Half*>(src), dst, n);
  else bf16_to_float_array(static_cast<const BFloat16*>(src), dst, n);
}

void from_float(DType dt, const float* src, void* dst, int64_t n) {
  if (dt == kFloat16) float_to_half_array(src, static_cast<Half*>(dst), n);
  else float_to_bf16_array(src, static_cast<BFloat16*>(dst), n);
}

// One chunk [b, e) of a grad/out pair.
template <bool Stats>
void run_chunk(const Tensor& g, const Tensor& o, int64_t b, int64_t e, float inv, bool in_place, Partial& p) {
  const DType gd = g.dtype(), od = o.dtype();
  const int64_t n = e - b;
  // In place with inv == 1 the values stay as they are: only the check runs (PyTorch does the same).
  const bool write = !(in_place && inv == 1.0f);
  if (gd == kFloat64) {
    double* x = g.data_ptr<double>() + b;
    scan_double<Stats>(x, write ? o.data_ptr<double>() + b : nullptr, n, static_cast<double>(inv), p);
    return;
  }
  if (gd == kFloat32) {
    const float* x = g.data_ptr<float>() + b;
    scan<Stats>(x, write ? o.data_ptr<float>() + b : nullptr, n, inv, p);
    return;
  }
  // Half grads: convert a block to fp32, scan, write fp32 (master grads) or convert back.
  const char* gx = static_cast<const char*>(g.raw_data()) + b * 2;
  char* ox = static_cast<char*>(o.raw_data()) + b * static_cast<int64_t>(element_size(od));
  float tmp[kBlock], out[kBlock];
  for (int64_t k = 0; k < n; k += kBlock) {
    const int64_t m = std::min(kBlock, n - k);
    to_float(gd, gx + k * 2, tmp, m);
    if (od == kFloat32) {
      scan<Stats>(tmp, write ? reinterpret_cast<float*>(ox) + k : nullptr, m, inv, p);
    } else {
      scan<Stats>(tmp, write ? out : nullptr, m, inv, p);
      if (write) from_float(od, out, ox + k * 2, m);
    }
  }
}

template <bool Stats>
Partial run_all(const std::vector<Tensor>& grads, const std::vector<Tensor>& outs, float inv) {
  struct Item {
    size_t t;
    int64_t b, e;
  };
  std::vector<Item> items;
  int64_t total = 0;
  for (size_t t = 0; t < grads.size(); ++t) {
    const int64_t n = grads[t].numel();
    total += n;
    for (int64_t b = 0; b < n; b += kChunk) items.push_back({t, b, std::min(n, b + kChunk)});
  }
  const int64_t count = static_cast<int64_t>(items.size());
  // One partial per part, combined in part order (or, max and integer sums: exact in any order).
  const int parts = total > kParallelGrain ? split_threads() : 1;
  std::vector<Partial> partial(static_cast<size_t>(parts));
  auto run_part = [&](int t, int nt) {
    Partial& acc = partial[static_cast<size_t>(t)];
    for (int64_t i = t * count / nt; i < (t + 1) * count / nt; ++i) {
      const Item& it = items[static_cast<size_t>(i)];
      Partial p;
      run_chunk<Stats>(grads[it.t], outs[it.t], it.b, it.e, inv, grads[it.t].is_same(outs[it.t]) ||
                       grads[it.t].raw_data() == outs[it.t].raw_data(), p);
      acc.nonfinite |= p.nonfinite;
      acc.max_abs = std::max(acc.max_abs, p.max_abs);
      acc.zeros += p.zeros;
      acc.subnormal += p.subnormal;
    }
  };
  if (parts > 1) run_parallel(parts, run_part);
  else run_part(0, 1);
  int bad = 0;
  float mx = 0.0f;
  int64_t zeros = 0, sub = 0;
  for (const Partial& p : partial) {
    bad |= p.nonfinite;
    mx = std::max(mx, p.max_abs);
    zeros += p.zeros;
    sub += p.subnormal;
  }
  Partial r;
  r.nonfinite = bad;
  r.max_abs = mx;
  r.zeros = zeros;
  r.subnormal = sub;
  return r;
}

}  // namespace

void non_finite_check_and_unscale(const std::vector<Tensor>& grads, const std::vector<Tensor>& outs,
                                              const Tensor& inv_scale, const Tensor& found_inf, const Tensor& stats) {
  const UnscaleWork w = prepare_unscale(grads, outs, inv_scale, found_inf, stats);
  if (w.grads.empty()) return;
  const std::vector<Tensor>& g_list = w.grads;
  const std::vector<Tensor>& o_list = w.outs;
  const float inv = *inv_scale.data_ptr<float>();
  const Partial r = stats.defined() ? run_all<true>(g_list, o_list, inv) : run_all<false>(g_list, o_list, inv);
  for (const auto& [work, target] : w.copy_back) copy(DeviceType::CPU, work, target);
  if (r.nonfinite) *found_inf.data_ptr<float>() = 1.0f;
  if (stats.defined()) {
    int64_t elements = 0;
    for (const Tensor& g : grads) elements += g.numel();
    double* s = stats.data_ptr<double>();
    s[kAmpStatMaxAbs] = std::max(s[kAmpStatMaxAbs], static_cast<double>(r.max_abs));
    s[kAmpStatZeros] += static_cast<double>(r.zeros);
    s[kAmpStatFp16Subnormal] += static_cast<double>(r.subnormal);
    s[kAmpStatElements] += static_cast<double>(elements);
  }
}

void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& hysteresis_tracker,
                              const Tensor& found_inf, const ScaleUpdateArgs& a, const Tensor& at_min_scale) {
  check_update_scale_args(scale, growth_tracker, hysteresis_tracker, found_inf, at_min_scale);
  float& s = *scale.data_ptr<float>();
  int32_t& growth = *growth_tracker.data_ptr<int32_t>();
  int32_t& hyst = *hysteresis_tracker.data_ptr<int32_t>();
  float& at_min = *at_min_scale.data_ptr<float>();
  at_min = 0.0f;
  if (*found_inf.data_ptr<float>() != 0.0f) {
    growth = 0;
    hyst = std::max(hyst - 1, 0);
    if (hyst == 0) {
      // As PyTorch's kernel: the product is taken in double (the factors are doubles), then
      // stored in the fp32 scale.
      float next = static_cast<float>(static_cast<double>(s) * a.backoff_factor);
      if (a.min_scale > 0.0) {
        if (static_cast<double>(s) <= a.min_scale) at_min = 1.0f;
        next = std::max(next, static_cast<float>(a.min_scale));
      }
      s = next;
    }
  } else {
    hyst = static_cast<int32_t>(a.hysteresis);
    const int64_t successful = static_cast<int64_t>(growth) + 1;
    // ">=" where PyTorch has "==": a tracker above the interval (interval lowered, or loaded
    // state) then grows at once instead of waiting for the int32 tracker to wrap around.
    if (successful >= a.growth_interval) {
      float next = static_cast<float>(static_cast<double>(s) * a.growth_factor);
      if (std::isfinite(next)) {
        if (a.max_scale > 0.0) next = std::min(next, static_cast<float>(a.max_scale));
        s = next;
      }
      growth = 0;
    } else {
      growth = static_cast<int32_t>(successful);
    }
  }
}

void register_amp() {
  backends::non_finite_check_and_unscale.set(DeviceType::CPU, non_finite_check_and_unscale);
  backends::update_scale.set(DeviceType::CPU, update_scale);
}

}  // namespace mixtrain::backends::cpu
