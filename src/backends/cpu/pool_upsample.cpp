// max_pool2d and 2-D upsampling (nearest, bilinear), forward and backward. Every kernel works on
// independent [H, W] planes, so threads split the N * C planes. Backward kernels scatter-add into
// a plane buffer in the compute type and round once, since several outputs may feed one input.
#include <cmath>
#include <limits>
#include <vector>

#include "backends/pool_upsample.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace mixtrain::backends::cpu {

namespace {

int64_t plane_grain(int64_t work_per_plane) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, work_per_plane));
}

// Runs f(grad_out plane, buffer plane) for each plane with a zeroed compute-type buffer of the
// input plane's size, then rounds the buffer into grad_x.
template <class T, class F>
void scatter_planes(const Tensor& grad_out, const Tensor& grad_x, F&& f) {
  using W = acc_t<T>;
  const int64_t planes = grad_x.size(0) * grad_x.size(1);
  const int64_t in_plane = grad_x.size(2) * grad_x.size(3), out_plane = grad_out.size(2) * grad_out.size(3);
  const T* pg = static_cast<const T*>(grad_out.raw_data());
  T* px = static_cast<T*>(grad_x.raw_data());
  parallel_for(planes, plane_grain(out_plane + in_plane), [&](int64_t b, int64_t e) {
    std::vector<W> buf(static_cast<size_t>(in_plane));
    for (int64_t pl = b; pl < e; ++pl) {
      std::fill(buf.begin(), buf.end(), W(0));
      f(pl, pg + pl * out_plane, buf.data());
      for (int64_t i = 0; i < in_plane; ++i) px[pl * in_plane + i] = static_cast<T>(buf[i]);
    }
  });
}

// One axis of a bilinear resize: for each output index, the two source indices and weights.
template <class W>
struct LinearTaps {
  std::vector<int64_t> i0, i1;
  std::vector<W> w0, w1;
};

// PyTorch's area_pixel_compute_source_index, in the compute type as its kernels do.
template <class W>
LinearTaps<W> linear_taps(int64_t in, int64_t out, W scale, bool align_corners) {
  LinearTaps<W> t;
  t.i0.resize(out), t.i1.resize(out), t.w0.resize(out), t.w1.resize(out);
  for (int64_t o = 0; o < out; ++o) {
    W src = align_corners ? scale * static_cast<W>(o) : scale * (static_cast<W>(o) + W(0.5)) - W(0.5);
    if (src < 0) src = 0;
    const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(src), in - 1);
    const W l1 = std::min<W>(src - static_cast<W>(i0), W(1));
    t.i0[o] = i0;
    t.i1[o] = i0 < in - 1 ? i0 + 1 : i0;
    t.w1[o] = l1;
    t.w0[o] = W(1) - l1;
  }
  return t;
}

// PyTorch's nearest_idx: floor(o * scale) in fp32, clamped to the last input index.
std::vector<int64_t> nearest_taps(int64_t in, int64_t out, double scale) {
  std::vector<int64_t> idx(out);
  const float s = static_cast<float>(scale);
  for (int64_t o = 0; o < out; ++o)
    idx[o] = std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<float>(o) * s)), in - 1);
  return idx;
}

template <class T>
void upsample_forward(const Tensor& x, const Upsample2dParams& p, const Tensor& out) {
  using W = acc_t<T>;
  const int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3), ho = out.size(2), wo = out.size(3);
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  if (p.mode == UpsampleMode::Nearest) {
    const auto ih = nearest_taps(h, ho, p.scale_h), iw = nearest_taps(w, wo, p.scale_w);
    parallel_for(planes, plane_grain(ho * wo), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl)
        for (int64_t i = 0; i < ho; ++i)
          for (int64_t j = 0; j < wo; ++j) po[(pl * ho + i) * wo + j] = px[(pl * h + ih[i]) * w + iw[j]];
    });
    return;
  }
  const auto th = linear_taps<W>(h, ho, static_cast<W>(p.scale_h), p.align_corners);
  const auto tw = linear_taps<W>(w, wo, static_cast<W>(p.scale_w), p.align_corners);
  parallel_for(planes, plane_grain(4 * ho * wo), [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) {
      const T* src = px + pl * h * w;
      for (int64_t i = 0; i < ho; ++i) {
        const T* r0 = src + th.i0[i] * w;
        const T* r1 = src + th.i1[i] * w;
        for (int64_t j = 0; j < wo; ++j) {
          const int64_t a = tw.i0[j], c = tw.i1[j];
          const W top = tw.w0[j] * static_cast<W>(r0[a]) + tw.w1[j] * static_cast<W>(r0[c]);
          const W bottom = tw.w0[j] * static_cast<W>(r1[a]) + tw.w1[j] * static_cast<W>(r1[c]);
          po[(pl * ho + i) * wo + j] = static_cast<T>(th.w0[i] * top + th.w1[i] * bottom);
        }
      }
    }
  });
}

template <class T>
void upsample_backward(const Tensor& grad_out, const Upsample2dParams& p, const Tensor& grad_x) {
  using W = acc_t<T>;
  const int64_t h = grad_x.size(2), w = grad_x.size(3), ho = grad_out.size(2), wo = grad_out.size(3);
  if (p.mode == UpsampleMode::Nearest) {
    const auto ih = nearest_taps(h, ho, p.scale_h), iw = nearest_taps(w, wo, p.scale_w);
    scatter_planes<T>(grad_out, grad_x, [&](int64_t, const T* g, W* buf) {
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) buf[ih[i] * w + iw[j]] += static_cast<W>(g[i * wo + j]);
    });
    return;
  }
  const auto th = linear_taps<W>(h, ho, static_cast<W>(p.scale_h), p.align_corners);
  const auto tw = linear_taps<W>(w, wo, static_cast<W>(p.scale_w), p.align_corners);
  scatter_planes<T>(grad_out, grad_x, [&](int64_t, const T* g, W* buf) {
    for (int64_t i = 0; i < ho; ++i) {
      W* r0 = buf + th.i0[i] * w;
      W* r1 = buf + th.i1[i] * w;
      for (int64_t j = 0; j < wo; ++j) {
        const W v = static_cast<W>(g[i * wo + j]);
        const W top = th.w0[i] * v, bottom = th.w1[i] * v;
        r0[tw.i0[j]] += tw.w0[j] * top;
        r0[tw.i1[j]] += tw.w1[j] * top;
        r1[tw.i0[j]] += tw.w0[j] * bottom;
        r1[tw.i1[j]] += tw.w1[j] * bottom;
      }
    }
  });
}

}  // namespace

void max_pool2d(const Tensor& x_in, const Pool2dParams& p, const Tensor& out_in,
                            const Tensor& indices_in) {
  if (!out_in.is_contiguous() || !indices_in.is_contiguous()) {
    const Tensor x = as_nchw(x_in);
    return write_nchw(out_in, [&](const Tensor& out) {
      write_nchw(indices_in, [&](const Tensor& indices) { max_pool2d(x, p, out, indices); });
    });
  }
  const Tensor x = as_nchw(x_in), &out = out_in, &indices = indices_in;
  MT_CHECK(x.is_contiguous() && out.is_contiguous() && indices.is_contiguous(), "max_pool2d: expected contiguous tensors");
  const int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3), ho = out.size(2), wo = out.size(3);
  int64_t* pi = indices.data_ptr<int64_t>();
  dispatch_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using W = acc_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    parallel_for(planes, plane_grain(ho * wo * p.kernel_h * p.kernel_w), [&](int64_t b, int64_t e) {
      for (int64_t pl = b; pl < e; ++pl) {
        const T* src = px + pl * h * w;
        for (int64_t i = 0; i < ho; ++i) {
          for (int64_t j = 0; j < wo; ++j) {
            W best = -std::numeric_limits<W>::infinity();
            int64_t arg = -1;
            for (int64_t ki = 0; ki < p.kernel_h; ++ki) {
              const int64_t ih = i * p.stride_h - p.pad_h + ki * p.dilation_h;
              if (ih < 0 || ih >= h) continue;
              for (int64_t kj = 0; kj < p.kernel_w; ++kj) {
                const int64_t iw = j * p.stride_w - p.pad_w + kj * p.dilation_w;
                if (iw < 0 || iw >= w) continue;
                const W v = static_cast<W>(src[ih * w + iw]);
                // NaN wins and stays, as in PyTorch; the first of equal maxima wins.
                if (arg < 0 || v > best || (v != v && best == best)) {
                  best = v;
                  arg = ih * w + iw;
                }
              }
            }
            // A dilated window can fall entirely in the padding: -inf with index -1, as nothing
            // in the input produced it.
            po[(pl * ho + i) * wo + j] = static_cast<T>(best);
            pi[(pl * ho + i) * wo + j] = arg;
          }
        }
      }
    });
  });
}

void max_pool2d_backward(const Tensor& grad_out_in, const Tensor& indices_in, const Tensor& grad_x_in) {
  if (!grad_x_in.is_contiguous()) {
    return write_nchw(grad_x_in, [&](const Tensor& grad_x) { max_pool2d_backward(grad_out_in, indices_in, grad_x); });
  }
  const Tensor grad_out = as_nchw(grad_out_in), indices = as_nchw(indices_in), &grad_x = grad_x_in;
  MT_CHECK(grad_out.is_contiguous() && indices.is_contiguous() && grad_x.is_contiguous(),
           "max_pool2d_backward: expected contiguous tensors");
  const int64_t out_plane = grad_out.size(2) * grad_out.size(3);
  const int64_t* pi = indices.data_ptr<int64_t>();
  dispatch_floating(grad_x.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using W = acc_t<T>;
    scatter_planes<T>(grad_out, grad_x, [&](int64_t pl, const T* g, W* buf) {
      const int64_t* idx = pi + pl * out_plane;
      for (int64_t k = 0; k < out_plane; ++k)
        if (idx[k] >= 0) buf[idx[k]] += static_cast<W>(g[k]);  // -1: a window of padding only
    });
  });
}

void upsample2d(const Tensor& x, const Upsample2dParams& p, const Tensor& out) {
  MT_CHECK(x.is_contiguous() && out.is_contiguous(), "upsample2d: expected contiguous tensors");
  dispatch_floating(x.dtype(), "upsample2d", [&](auto tag) { upsample_forward<typename decltype(tag)::type>(x, p, out); });
}

void upsample2d_backward(const Tensor& grad_out, const Upsample2dParams& p, const Tensor& grad_x) {
  MT_CHECK(grad_out.is_contiguous() && grad_x.is_contiguous(), "upsample2d_backward: expected contiguous tensors");
  dispatch_floating(grad_x.dtype(), "upsample2d_backward",
                    [&](auto tag) { upsample_backward<typename decltype(tag)::type>(grad_out, p, grad_x); });
}

void register_pool_upsample() {
  backends::max_pool2d.set(DeviceType::CPU, max_pool2d);
  backends::max_pool2d_backward.set(DeviceType::CPU, max_pool2d_backward);
  backends::upsample2d.set(DeviceType::CPU, upsample2d);
  backends::upsample2d_backward.set(DeviceType::CPU, upsample2d_backward);
}

}  // namespace mixtrain::backends::cpu
