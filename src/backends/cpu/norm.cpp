// Normalization kernels: batch norm (per-channel statistics over [N, S]) and the row norms,
// layer norm and group norm (per-row statistics). Statistics are accumulated in double and
// stored in the stat dtype (fp32 for half inputs, never fp16: a half sum of squares of a few
// thousand activations overflows or loses every digit); the normalization itself runs in the
// compute type and is rounded once.
#include <cmath>
#include <mutex>
#include <type_traits>
#include <vector>

#include "backends/norm.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "kernels/cpu/norm_vector.h"

namespace mixtrain::backends::cpu {

namespace {

// Values of a small per-channel tensor (weight, bias, statistics) of any floating dtype, or
// `fill` repeated when the tensor is undefined.
std::vector<double> channel_values(const Tensor& t, int64_t n, double fill) {
  std::vector<double> v(static_cast<size_t>(n), fill);
  if (!t.defined()) return v;
  MT_CHECK(t.is_contiguous() && t.numel() == n, "norm: per-channel tensor ", t.summary(), " must hold ", n, " values");
  dispatch_floating(t.dtype(), "norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(static_cast<acc_t<T>>(p[i]));
  });
  return v;
}

void store_channel_values(const std::vector<double>& v, const Tensor& t) {
  dispatch_floating(t.dtype(), "norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(t.raw_data());
    for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<T>(static_cast<acc_t<T>>(v[i]));
  });
}

// Per-thread partial sums merged under a lock: channel sums across rows that threads split.
struct SharedSums {
  std::vector<double> a, b;
  std::mutex mu;
  explicit SharedSums(int64_t n) : a(static_cast<size_t>(n), 0.0), b(static_cast<size_t>(n), 0.0) {}
  void merge(const std::vector<double>& pa, const std::vector<double>& pb) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < a.size(); ++i) a[i] += pa[i], b[i] += pb[i];
  }
};

// ---- Row norms. x viewed as [rows, len]; element j of row r has affine channel
// (r % groups) * (len / s) + j / s. Layer norm: groups = 1, s = 1. Group norm: rows = N * G,
// len = C / G * S.
struct RowLayout {
  int64_t rows, len, groups, s, channels;
  // Calls f(j, channel) for every element j of row r, stepping the channel instead of dividing
  // per element (a 64-bit division per element was most of layer norm's time).
  template <class F>
  void for_each_in_row(int64_t r, F&& f) const {
    const int64_t per_row = len / s, first = (r % groups) * per_row;
    for (int64_t c = 0, j = 0; c < per_row; ++c)
      for (int64_t k = 0; k < s; ++k, ++j) f(j, first + c);
  }
};

template <class T>
void row_norm_forward(const Tensor& x, const RowLayout& lay, double eps, const Tensor& weight, const Tensor& bias,
                      const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  using W = acc_t<T>;
  const std::vector<double> wv = channel_values(weight, lay.channels, 1.0), bv = channel_values(bias, lay.channels, 0.0);
  std::vector<double> mv(static_cast<size_t>(lay.rows)), rv(static_cast<size_t>(lay.rows));
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  parallel_for(lay.rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, lay.len)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* row = px + r * lay.len;
      const double sum = lane_sum(lay.len, [&](int64_t j) { return static_cast<double>(static_cast<W>(row[j])); });
      const double mu = sum / static_cast<double>(lay.len);
      const double sq = lane_sum(lay.len, [&](int64_t j) {  // two passes: no cancellation when |mean| >> std
        const double d = static_cast<double>(static_cast<W>(row[j])) - mu;
        return d * d;
      });
      mv[r] = mu;
      rv[r] = 1.0 / std::sqrt(sq / static_cast<double>(lay.len) + eps);
      // Normalize with the statistics as stored, so backward sees exactly what forward used.
      const W m = static_cast<W>(mu), rs = static_cast<W>(rv[r]);
      lay.for_each_in_row(r, [&](int64_t j, int64_t ch) {
        po[r * lay.len + j] =
            static_cast<T>((static_cast<W>(row[j]) - m) * rs * static_cast<W>(wv[ch]) + static_cast<W>(bv[ch]));
      });
    }
  });
  store_channel_values(mv, mean);
  store_channel_values(rv, rstd);
}

template <class T>
void row_norm_backward(const Tensor& x, const Tensor& grad_y, const RowLayout& lay, const Tensor& mean,
                       const Tensor& rstd, const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                       const Tensor& grad_bias) {
  using W = acc_t<T>;
  const std::vector<double> wv = channel_values(weight, lay.channels, 1.0);
  const std::vector<double> mv = channel_values(mean, lay.rows, 0.0), rv = channel_values(rstd, lay.rows, 1.0);
  const T* px = static_cast<const T*>(x.raw_data());
  const T* pg = static_cast<const T*>(grad_y.raw_data());
  T* pdx = grad_x.defined() ? static_cast<T*>(grad_x.raw_data()) : nullptr;
  SharedSums affine(lay.channels);  // a: sum dy * xhat (grad_weight), b: sum dy (grad_bias)
  const double n = static_cast<double>(lay.len);
  parallel_for(lay.rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, lay.len)), [&](int64_t b, int64_t e) {
    std::vector<double> gw(static_cast<size_t>(lay.channels), 0.0), gb(static_cast<size_t>(lay.channels), 0.0);
    for (int64_t r = b; r < e; ++r) {
      const T* row = px + r * lay.len;
      const T* grow = pg + r * lay.len;
      const double mu = mv[r], rs = rv[r];
      double sum_dxhat = 0, sum_dxhat_xhat = 0;
      lay.for_each_in_row(r, [&](int64_t j, int64_t ch) {
        const double xhat = (static_cast<double>(static_cast<W>(row[j])) - mu) * rs;
        const double dy = static_cast<double>(static_cast<W>(grow[j]));
        sum_dxhat += dy * wv[ch];
        sum_dxhat_xhat += dy * wv[ch] * xhat;
        gw[ch] += dy * xhat;
        gb[ch] += dy;
      });
      if (!pdx) continue;
      // d/dx of (x - mean) * rstd through the row's mean and variance.
      const double mean_dxhat = sum_dxhat / n, mean_dxhat_xhat = sum_dxhat_xhat / n;  // once per row, as on CUDA
      lay.for_each_in_row(r, [&](int64_t j, int64_t ch) {
        const double xhat = (static_cast<double>(static_cast<W>(row[j])) - mu) * rs;
        const double dxhat = static_cast<double>(static_cast<W>(grow[j])) * wv[ch];
        pdx[r * lay.len + j] = static_cast<T>(static_cast<W>(rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat)));
      });
    }
    affine.merge(gw, gb);
  });
  if (grad_weight.defined()) store_channel_values(affine.a, grad_weight);
  if (grad_bias.defined()) store_channel_values(affine.b, grad_bias);
}

// ---- Layer norm's rows on the vector kernels (norm_vector.h), for the types that compute in
// fp32: a half row is widened per row and its output rounded once, as the generic rows round it.
template <class T>
constexpr bool kVectorRows = std::is_same_v<acc_t<T>, float>;

std::vector<float> float_values(const Tensor& t, int64_t n, double fill) {
  const std::vector<double> v = channel_values(t, n, fill);
  return std::vector<float>(v.begin(), v.end());
}

template <class T>
void layer_norm_vector(const Tensor& x, const RowLayout& lay, double eps, const Tensor& weight, const Tensor& bias,
                       const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const LayerNormRowFn row_fn = norm_vector().forward;
  const std::vector<float> wf = float_values(weight, lay.len, 1.0), bf = float_values(bias, lay.len, 0.0);
  std::vector<double> mv(static_cast<size_t>(lay.rows)), rv(static_cast<size_t>(lay.rows));
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  parallel_for(lay.rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, lay.len)), [&](int64_t b, int64_t e) {
    std::vector<float> xbuf, ybuf;
    for (int64_t r = b; r < e; ++r) {
      const float* xr = as_acc(px + r * lay.len, lay.len, xbuf);
      float* yr = acc_out(po + r * lay.len, lay.len, ybuf);
      row_fn(yr, lay.len, xr, wf.data(), bf.data(), eps, &mv[r], &rv[r]);
      store_acc(yr, lay.len, po + r * lay.len);
    }
  });
  store_channel_values(mv, mean);
  store_channel_values(rv, rstd);
}

template <class T>
void layer_norm_vector_backward(const Tensor& x, const Tensor& grad_y, const RowLayout& lay, const Tensor& mean,
                                const Tensor& rstd, const Tensor& weight, const Tensor& grad_x,
                                const Tensor& grad_weight, const Tensor& grad_bias) {
  const LayerNormRowBackwardFn row_fn = norm_vector().backward;
  const std::vector<float> wf = float_values(weight, lay.len, 1.0);
  const std::vector<double> mv = channel_values(mean, lay.rows, 0.0), rv = channel_values(rstd, lay.rows, 1.0);
  const T* px = static_cast<const T*>(x.raw_data());
  const T* pg = static_cast<const T*>(grad_y.raw_data());
  T* pdx = grad_x.defined() ? static_cast<T*>(grad_x.raw_data()) : nullptr;
  SharedSums affine(lay.channels);  // a: sum dy * xhat (grad_weight), b: sum dy (grad_bias)
  parallel_for(lay.rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, lay.len)), [&](int64_t b, int64_t e) {
    std::vector<double> gw(static_cast<size_t>(lay.len), 0.0), gb(static_cast<size_t>(lay.len), 0.0);
    std::vector<float> xbuf, gbuf, dxbuf;
    for (int64_t r = b; r < e; ++r) {
      const float* xr = as_acc(px + r * lay.len, lay.len, xbuf);
      const float* gr = as_acc(pg + r * lay.len, lay.len, gbuf);
      float* dxr = pdx ? acc_out(pdx + r * lay.len, lay.len, dxbuf) : nullptr;
      row_fn(dxr, lay.len, xr, gr, wf.data(), mv[r], rv[r], gw.data(), gb.data());
      if (pdx) store_acc(dxr, lay.len, pdx + r * lay.len);
    }
    affine.merge(gw, gb);
  });
  if (grad_weight.defined()) store_channel_values(affine.a, grad_weight);
  if (grad_bias.defined()) store_channel_values(affine.b, grad_bias);
}

}  // namespace

// ---- Batch norm: x viewed as [n, c, s].

void batch_norm_stats(const Tensor& x, int64_t n, int64_t c, int64_t s, double eps, const Tensor& mean,
                                  const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var,
                                  double momentum) {
  MT_CHECK(x.is_contiguous(), "batch_norm: expected a contiguous input");
  std::vector<double> mv(static_cast<size_t>(c)), vv(static_cast<size_t>(c));
  dispatch_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x.raw_data());
    parallel_for(c, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, n * s)), [&](int64_t b, int64_t e) {
      std::vector<acc_t<T>> buf;
      for (int64_t ch = b; ch < e; ++ch) {
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < n; ++i) {
          const acc_t<T>* plane = as_acc(px + (i * c + ch) * s, s, buf);
          sum += lane_sum(s, [&](int64_t k) { return static_cast<double>(plane[k]); });
        }
        const double mu = sum / static_cast<double>(n * s);
        for (int64_t i = 0; i < n; ++i) {
          const acc_t<T>* plane = as_acc(px + (i * c + ch) * s, s, buf);
          sq += lane_sum(s, [&](int64_t k) {
            const double d = static_cast<double>(plane[k]) - mu;
            return d * d;
          });
        }
        mv[ch] = mu;
        vv[ch] = sq / static_cast<double>(n * s);
      }
    });
  });
  std::vector<double> iv(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) iv[ch] = 1.0 / std::sqrt(vv[ch] + eps);
  store_channel_values(mv, mean);
  store_channel_values(iv, invstd);
  if (running_mean.defined()) {
    std::vector<double> rm = channel_values(running_mean, c, 0.0);
    for (int64_t ch = 0; ch < c; ++ch) rm[ch] = (1.0 - momentum) * rm[ch] + momentum * mv[ch];
    store_channel_values(rm, running_mean);
  }
  if (running_var.defined()) {
    // The running variance is unbiased, as PyTorch keeps it; the ops layer ensures n * s > 1.
    const double m = static_cast<double>(n * s), unbias = m / std::max(1.0, m - 1.0);
    std::vector<double> rv = channel_values(running_var, c, 1.0);
    for (int64_t ch = 0; ch < c; ++ch) rv[ch] = (1.0 - momentum) * rv[ch] + momentum * vv[ch] * unbias;
    store_channel_values(rv, running_var);
  }
}

void batch_norm(const Tensor& x, int64_t n, int64_t c, int64_t s, const Tensor& mean,
                            const Tensor& invstd, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  MT_CHECK(x.is_contiguous() && out.is_contiguous(), "batch_norm: expected contiguous tensors");
  const std::vector<double> mv = channel_values(mean, c, 0.0), iv = channel_values(invstd, c, 1.0);
  const std::vector<double> wv = channel_values(weight, c, 1.0), bv = channel_values(bias, c, 0.0);
  dispatch_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using W = acc_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    parallel_for(n * c, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, s)), [&](int64_t b, int64_t e) {
      std::vector<W> xbuf, obuf;
      for (int64_t nc = b; nc < e; ++nc) {
        const int64_t ch = nc % c;
        const W m = static_cast<W>(mv[ch]), is = static_cast<W>(iv[ch]), w = static_cast<W>(wv[ch]),
                bb = static_cast<W>(bv[ch]);
        const W* xs = as_acc(px + nc * s, s, xbuf);
        W* o = acc_out(po + nc * s, s, obuf);
        for (int64_t k = 0; k < s; ++k) o[k] = (xs[k] - m) * is * w + bb;
        store_acc(o, s, po + nc * s);
      }
    });
  });
}

void batch_norm_backward(const Tensor& x, const Tensor& grad_y, int64_t n, int64_t c, int64_t s,
                                     const Tensor& mean, const Tensor& invstd, const Tensor& weight, bool batch_stats,
                                     const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
  MT_CHECK(x.is_contiguous() && grad_y.is_contiguous(), "batch_norm_backward: expected contiguous tensors");
  const std::vector<double> mv = channel_values(mean, c, 0.0), iv = channel_values(invstd, c, 1.0);
  const std::vector<double> wv = channel_values(weight, c, 1.0);
  std::vector<double> sum_dy(static_cast<size_t>(c)), sum_dy_xhat(static_cast<size_t>(c));
  dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using W = acc_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    const T* pg = static_cast<const T*>(grad_y.raw_data());
    parallel_for(c, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, n * s)), [&](int64_t b, int64_t e) {
      std::vector<W> xbuf, gbuf;
      for (int64_t ch = b; ch < e; ++ch) {
        double a = 0, d = 0;
        const double mu = mv[ch], rs = iv[ch];
        for (int64_t i = 0; i < n; ++i) {
          const W* xs = as_acc(px + (i * c + ch) * s, s, xbuf);
          const W* gs = as_acc(pg + (i * c + ch) * s, s, gbuf);
          a += lane_sum(s, [&](int64_t k) { return static_cast<double>(gs[k]); });
          d += lane_sum(s, [&](int64_t k) { return static_cast<double>(gs[k]) * (static_cast<double>(xs[k]) - mu) * rs; });
        }
        sum_dy[ch] = a;
        sum_dy_xhat[ch] = d;
      }
    });
    if (!grad_x.defined()) return;
    T* pdx = static_cast<T*>(grad_x.raw_data());
    const double inv_count = 1.0 / static_cast<double>(n * s);  // the CUDA kernel's form: no division per element
    parallel_for(n * c, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, s)), [&](int64_t b, int64_t e) {
      std::vector<W> xbuf, gbuf, obuf;
      for (int64_t nc = b; nc < e; ++nc) {
        const int64_t ch = nc % c;
        const double k_scale = wv[ch] * iv[ch];
        const double mean_dy = sum_dy[ch] * inv_count, mean_dy_xhat = sum_dy_xhat[ch] * inv_count;
        const W* gs = as_acc(pg + nc * s, s, gbuf);
        const W* xs = batch_stats ? as_acc(px + nc * s, s, xbuf) : nullptr;
        W* o = acc_out(pdx + nc * s, s, obuf);
        for (int64_t k = 0; k < s; ++k) {
          const double dy = static_cast<double>(gs[k]);
          double dx = dy;
          if (batch_stats) {
            // Through the batch mean and variance: subtract the parts of dy they explain.
            const double xhat = (static_cast<double>(xs[k]) - mv[ch]) * iv[ch];
            dx = dy - mean_dy - xhat * mean_dy_xhat;
          }
          o[k] = static_cast<W>(k_scale * dx);
        }
        store_acc(o, s, pdx + nc * s);
      }
    });
  });
  if (grad_weight.defined()) store_channel_values(sum_dy_xhat, grad_weight);
  if (grad_bias.defined()) store_channel_values(sum_dy, grad_bias);
}

// ---- Group norm and layer norm.

void group_norm(const Tensor& x, int64_t n, int64_t c, int64_t s, int64_t groups, double eps,
                            const Tensor& weight, const Tensor& bias, const Tensor& out, const Tensor& mean,
                            const Tensor& rstd) {
  MT_CHECK(x.is_contiguous() && out.is_contiguous(), "group_norm: expected contiguous tensors");
  const RowLayout lay{n * groups, c / groups * s, groups, s, c};
  dispatch_floating(x.dtype(), "group_norm", [&](auto tag) {
    row_norm_forward<typename decltype(tag)::type>(x, lay, eps, weight, bias, out, mean, rstd);
  });
}

void group_norm_backward(const Tensor& x, const Tensor& grad_y, int64_t n, int64_t c, int64_t s,
                                     int64_t groups, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                     const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
  MT_CHECK(x.is_contiguous() && grad_y.is_contiguous(), "group_norm_backward: expected contiguous tensors");
  const RowLayout lay{n * groups, c / groups * s, groups, s, c};
  dispatch_floating(x.dtype(), "group_norm_backward", [&](auto tag) {
    row_norm_backward<typename decltype(tag)::type>(x, grad_y, lay, mean, rstd, weight, grad_x, grad_weight, grad_bias);
  });
}

void layer_norm(const Tensor& x, int64_t rows, int64_t cols, double eps, const Tensor& weight,
                            const Tensor& bias, const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  MT_CHECK(x.is_contiguous() && out.is_contiguous(), "layer_norm: expected contiguous tensors");
  const RowLayout lay{rows, cols, 1, 1, cols};
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kVectorRows<T>) layer_norm_vector<T>(x, lay, eps, weight, bias, out, mean, rstd);
    else row_norm_forward<T>(x, lay, eps, weight, bias, out, mean, rstd);
  });
}

void layer_norm_backward(const Tensor& x, const Tensor& grad_y, int64_t rows, int64_t cols,
                                     const Tensor& mean, const Tensor& rstd, const Tensor& weight, const Tensor& grad_x,
                                     const Tensor& grad_weight, const Tensor& grad_bias) {
  MT_CHECK(x.is_contiguous() && grad_y.is_contiguous(), "layer_norm_backward: expected contiguous tensors");
  const RowLayout lay{rows, cols, 1, 1, cols};
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kVectorRows<T>)
      layer_norm_vector_backward<T>(x, grad_y, lay, mean, rstd, weight, grad_x, grad_weight, grad_bias);
    else
      row_norm_backward<T>(x, grad_y, lay, mean, rstd, weight, grad_x, grad_weight, grad_bias);
  });
}

void register_norm() {
  backends::batch_norm_stats.set(DeviceType::CPU, batch_norm_stats);
  backends::batch_norm.set(DeviceType::CPU, batch_norm);
  backends::batch_norm_backward.set(DeviceType::CPU, batch_norm_backward);
  backends::group_norm.set(DeviceType::CPU, group_norm);
  backends::group_norm_backward.set(DeviceType::CPU, group_norm_backward);
  backends::layer_norm.set(DeviceType::CPU, layer_norm);
  backends::layer_norm_backward.set(DeviceType::CPU, layer_norm_backward);
}

}  // namespace mixtrain::backends::cpu
