// 2-D convolution on oneDNN where it takes the call (onednn/onednn.h: fp32 and bf16 above a size
// threshold), else the backend's own: im2col + GEMM, one sample at a time (the column buffer of a whole batch of
// UNet-sized images would not fit), groups as separate GEMMs over slices of the same buffers.
// fp16/bf16 are widened to fp32 before they are unfolded, multiplied in fp32 and rounded once on
// the way out, as cuDNN does with fp32 accumulation; bf16 products then run on the vdpbf16ps
// kernel where the CPU has it (gemm_bf16.h), which takes the widened values back exactly.
#include <algorithm>
#include <exception>
#include <string>
#include <type_traits>

#include <Eigen/Core>
#include <vector>

#include "backends/conv.h"
#include "backends/cpu/cpu_backend.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_eigen.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/onednn/onednn.h"
#include "backends/cpu/verbose.h"

namespace mixtrain::backends::cpu {

namespace {

template <class S>
using RowMat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S>
using MapMat = Eigen::Map<RowMat<S>>;

// A contiguous row-major [r, c] block, and its transpose, for gemm_product (gemm_eigen.h).
template <class S>
GemmMatrix<S> rows(const S* p, int64_t r, int64_t c) {
  return {p, r, c, c, 1};
}
template <class S>
GemmMatrix<S> transposed(GemmMatrix<S> m) {
  return {m.data, m.cols, m.rows, m.col_stride, m.row_stride};
}

// The product for a convolution on T: widened bf16 operands hold bf16 values, so the bf16 kernel
// takes them back exactly when it packs them.
template <class T, class W>
void conv_gemm(const GemmCall<W>& c) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (bf16_gemm_enabled()) return gemm_bf16_product(GemmBf16Call<float>{c.a, c.b, c.out, c.ldc, c.accumulate});
  }
  gemm_product(c);
}

struct Geometry {
  int64_t n, c, h, w;      // input
  int64_t co, kh, kw;      // weight [co, c / groups, kh, kw]
  int64_t ho, wo;          // output
  Conv2dParams p;
  int64_t cg() const { return c / p.groups; }
  int64_t cog() const { return co / p.groups; }
  int64_t k() const { return cg() * kh * kw; }  // GEMM depth per group
  int64_t l() const { return ho * wo; }
};

Geometry geometry(const Tensor& x, const Tensor& w, const Tensor& out, const Conv2dParams& p) {
  MT_CHECK(x.is_contiguous() && w.is_contiguous() && out.is_contiguous(), "conv2d: expected contiguous tensors");
  return {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), out.size(2), out.size(3), p};
}

// The output columns [lo, hi) whose input column iw = ow * stride_w + off lies inside the
// image for kernel column kj; the rest read padding. Computed once per kernel column so the
// unfold and its adjoint run without a bounds check per element.
struct ColumnSpan {
  int64_t lo, hi, off;
};

ColumnSpan column_span(const Geometry& g, int64_t kj) {
  const int64_t off = kj * g.p.dilation_w - g.p.pad_w, sw = g.p.stride_w;
  const int64_t lo = std::min<int64_t>(g.wo, off >= 0 ? 0 : (-off + sw - 1) / sw);
  const int64_t last = g.w - 1 - off;  // the largest ow * sw that stays inside
  const int64_t hi = std::clamp<int64_t>(last >= 0 ? last / sw + 1 : 0, lo, g.wo);
  return {lo, hi, off};
}

// Unfolds one sample x [c, h, w] into cols [c * kh * kw, ho * wo]; taps in the padding read 0.
// Half samples are widened first (one vectorized pass over c * h * w, not kh * kw per element).
template <class W>
void im2col(const W* x, const Geometry& g, W* cols) {
  const int64_t rows = g.c * g.kh * g.kw, l = g.l(), sw = g.p.stride_w;
  parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, l)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t ch = r / (g.kh * g.kw), ki = (r / g.kw) % g.kh, kj = r % g.kw;
      const ColumnSpan cs = column_span(g, kj);
      const W* plane = x + ch * g.h * g.w;
      W* dst = cols + r * l;
      for (int64_t oh = 0; oh < g.ho; ++oh) {
        const int64_t ih = oh * g.p.stride_h - g.p.pad_h + ki * g.p.dilation_h;
        W* row = dst + oh * g.wo;
        if (ih < 0 || ih >= g.h) {
          std::fill(row, row + g.wo, W(0));
          continue;
        }
        std::fill(row, row + cs.lo, W(0));
        std::fill(row + cs.hi, row + g.wo, W(0));
        if (cs.hi == cs.lo) continue;
        const W* in = plane + ih * g.w + cs.lo * sw + cs.off;  // the first tap inside the image
        if (sw == 1) {
          std::copy(in, in + (cs.hi - cs.lo), row + cs.lo);
        } else {
          for (int64_t i = 0; i < cs.hi - cs.lo; ++i) row[cs.lo + i] = in[i * sw];
        }
      }
    }
  });
}

// The adjoint of im2col: adds cols back into x [c, h, w] (not cleared here). Channels are
// independent, so threads split them and never write the same element.
template <class W>
void col2im(const W* cols, const Geometry& g, W* x) {
  const int64_t l = g.l(), kk = g.kh * g.kw, sw = g.p.stride_w;
  parallel_for(g.c, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, kk * l)), [&](int64_t b, int64_t e) {
    for (int64_t ch = b; ch < e; ++ch) {
      W* plane = x + ch * g.h * g.w;
      for (int64_t q = 0; q < kk; ++q) {
        const int64_t ki = q / g.kw, kj = q % g.kw;
        const ColumnSpan cs = column_span(g, kj);
        const W* src = cols + (ch * kk + q) * l;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          const int64_t ih = oh * g.p.stride_h - g.p.pad_h + ki * g.p.dilation_h;
          if (ih < 0 || ih >= g.h || cs.hi == cs.lo) continue;
          W* out = plane + ih * g.w + cs.lo * sw + cs.off;
          const W* in = src + oh * g.wo + cs.lo;
          if (sw == 1) {
            for (int64_t i = 0; i < cs.hi - cs.lo; ++i) out[i] += in[i];
          } else {
            for (int64_t i = 0; i < cs.hi - cs.lo; ++i) out[i * sw] += in[i];
          }
        }
      }
    }
  });
}

// One thread's buffers for the per-sample loops.
template <class W>
struct SampleScratch {
  std::vector<W> input, grad_out, cols, output, grad_w;  // widened operands, unfolded, results
};

// Column buffers up to this size are kept one per thread, so threads can take whole samples.
constexpr int64_t kPerThreadColumnBytes = int64_t(16) << 20;

// Runs f(s, scratch) for every sample s. With several samples and column buffers small enough to
// keep one per thread, each thread takes a contiguous run of samples (a small convolution's unfold
// and GEMMs are too short to split well); otherwise samples run in turn and the work inside each
// is split across the threads. Returns the scratch of every thread, in thread order.
template <class W, class F>
std::vector<SampleScratch<W>> for_each_sample(const Geometry& g, F&& f) {
  const int64_t column_bytes = g.c * g.kh * g.kw * g.l() * static_cast<int64_t>(sizeof(W));
  const int threads = g.n >= 2 && column_bytes <= kPerThreadColumnBytes
                          ? static_cast<int>(std::min<int64_t>(split_threads(), g.n))
                          : 1;
  std::vector<SampleScratch<W>> scratch(static_cast<size_t>(threads));
  if (threads == 1) {
    for (int64_t s = 0; s < g.n; ++s) f(s, scratch[0]);
    return scratch;
  }
  // An exception must not leave the parallel region: each thread's is kept and rethrown after it.
  std::vector<std::exception_ptr> failure(static_cast<size_t>(threads));
  // The runs are fixed by `threads`: when the CPU governor runs them on one thread (threads.h),
  // the per-run weight-gradient sums, and so the result, do not change.
  const int64_t chunk = (g.n + threads - 1) / threads;
  run_parallel(threads, [&](int r, int) {
    try {
      for (int64_t s = r * chunk; s < std::min(g.n, (r + 1) * chunk); ++s) f(s, scratch[static_cast<size_t>(r)]);
    } catch (...) {
      failure[static_cast<size_t>(r)] = std::current_exception();
    }
  });
  for (const std::exception_ptr& e : failure)
    if (e) std::rethrow_exception(e);
  return scratch;
}

template <class T>
void forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Geometry& g, const Tensor& out) {
  using W = acc_t<T>;
  std::vector<W> wbuf, bbuf;
  const W* wp = as_acc<true>(static_cast<const T*>(w.raw_data()), w.numel(), wbuf);
  const W* bp = bias.defined() ? as_acc<true>(static_cast<const T*>(bias.raw_data()), g.co, bbuf) : nullptr;
  const T* xp = static_cast<const T*>(x.raw_data());
  T* op = static_cast<T*>(out.raw_data());
  const int64_t k = g.k(), l = g.l(), cog = g.cog();
  for_each_sample<W>(g, [&](int64_t s, SampleScratch<W>& sc) {
    sc.cols.resize(static_cast<size_t>(g.c * g.kh * g.kw * l));
    im2col(as_acc<true>(xp + s * g.c * g.h * g.w, g.c * g.h * g.w, sc.input), g, sc.cols.data());
    W* o = acc_out(op + s * g.co * l, g.co * l, sc.output);
    for (int64_t gi = 0; gi < g.p.groups; ++gi) {
      MapMat<W> og(o + gi * cog * l, cog, l);
      conv_gemm<T>(GemmCall<W>{rows(wp + gi * cog * k, cog, k), rows(sc.cols.data() + gi * k * l, k, l), og.data(), l,
                               false});
      if (bp) og.colwise() += Eigen::Map<const Eigen::Matrix<W, Eigen::Dynamic, 1>>(bp + gi * cog, cog);
    }
    store_acc<true>(o, g.co * l, op + s * g.co * l);
  });
}

template <class T>
void backward_input(const Tensor& grad_out, const Tensor& w, const Geometry& g, const Tensor& grad_x) {
  using W = acc_t<T>;
  std::vector<W> wbuf;
  const W* wp = as_acc<true>(static_cast<const T*>(w.raw_data()), w.numel(), wbuf);
  const T* gp = static_cast<const T*>(grad_out.raw_data());
  T* xp = static_cast<T*>(grad_x.raw_data());
  const int64_t k = g.k(), l = g.l(), cog = g.cog();
  for_each_sample<W>(g, [&](int64_t s, SampleScratch<W>& sc) {
    sc.cols.resize(static_cast<size_t>(g.c * g.kh * g.kw * l));
    const W* go = as_acc<true>(gp + s * g.co * l, g.co * l, sc.grad_out);
    for (int64_t gi = 0; gi < g.p.groups; ++gi) {
      conv_gemm<T>(GemmCall<W>{transposed(rows(wp + gi * cog * k, cog, k)), rows(go + gi * cog * l, cog, l),
                               sc.cols.data() + gi * k * l, l, false});
    }
    sc.output.assign(static_cast<size_t>(g.c * g.h * g.w), W(0));
    col2im(sc.cols.data(), g, sc.output.data());
    store_acc<true>(sc.output.data(), g.c * g.h * g.w, xp + s * g.c * g.h * g.w);
  });
}

template <class T>
void backward_weight(const Tensor& grad_out, const Tensor& x, const Geometry& g, const Tensor& grad_w) {
  using W = acc_t<T>;
  const int64_t k = g.k(), l = g.l(), cog = g.cog();
  const T* gp = static_cast<const T*>(grad_out.raw_data());
  const T* xp = static_cast<const T*>(x.raw_data());
  // Each thread sums its samples in W; the threads' sums are added in thread order and rounded once.
  std::vector<SampleScratch<W>> parts = for_each_sample<W>(g, [&](int64_t s, SampleScratch<W>& sc) {
    if (sc.grad_w.empty()) sc.grad_w.assign(static_cast<size_t>(g.co * k), W(0));
    sc.cols.resize(static_cast<size_t>(g.c * g.kh * g.kw * l));
    const W* go = as_acc<true>(gp + s * g.co * l, g.co * l, sc.grad_out);
    im2col(as_acc<true>(xp + s * g.c * g.h * g.w, g.c * g.h * g.w, sc.input), g, sc.cols.data());
    for (int64_t gi = 0; gi < g.p.groups; ++gi) {
      conv_gemm<T>(GemmCall<W>{rows(go + gi * cog * l, cog, l), transposed(rows(sc.cols.data() + gi * k * l, k, l)),
                               sc.grad_w.data() + gi * cog * k, k, true});
    }
  });
  std::vector<W>& gw = parts[0].grad_w;
  gw.resize(static_cast<size_t>(g.co * k), W(0));  // an empty batch: zeros
  for (size_t t = 1; t < parts.size(); ++t)
    for (size_t i = 0; i < parts[t].grad_w.size(); ++i) gw[i] += parts[t].grad_w[i];
  store_acc<true>(gw.data(), g.co * k, static_cast<T*>(grad_w.raw_data()));
}

// The own kernels' name for the trace: the GEMM under the im2col.
std::string own_conv_impl(DType dt) {
  if (dt == kBFloat16 && bf16_gemm_enabled()) return "own:im2col+avx512bf16";
  return std::string("own:im2col+eigen:") + gemm_isa() + (is_half(dt) ? " (widened to fp32)" : "");
}

// One kernel call: oneDNN's when it takes it, else the own kernels', traced.
template <class OneDnn, class Own, class Describe>
void run_conv(const char* kernel, DType dt, OneDnn&& onednn, Own&& own, Describe&& operands) {
  const CallTrace trace(kernel);
  std::string impl;
  if (!onednn(impl)) {
    impl = own_conv_impl(dt);
    own();
  }
  trace.done(impl, operands);
}

}  // namespace

void conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const Conv2dParams& p, const Tensor& out_in) {
  run_conv(
      "conv2d", x_in.dtype(), [&](std::string& impl) { return onednn_conv2d(x_in, w_in, bias, p, out_in, impl); },
      [&] {
        const Tensor x = as_nchw(x_in), w = as_nchw(w_in);
        write_nchw(out_in, [&](const Tensor& out) {
          const Geometry g = geometry(x, w, out, p);
          dispatch_floating(x.dtype(), "conv2d",
                            [&](auto tag) { forward<typename decltype(tag)::type>(x, w, bias, g, out); });
        });
      },
      [&] { return conv_operands(x_in, w_in, out_in, bias, p); });
}

void conv2d_backward_input(const Tensor& grad_out_in, const Tensor& w_in, const Conv2dParams& p,
                           const Tensor& grad_x_in) {
  run_conv(
      "conv2d_backward_input", w_in.dtype(),
      [&](std::string& impl) { return onednn_conv2d_backward_input(grad_out_in, w_in, p, grad_x_in, impl); },
      [&] {
        const Tensor grad_out = as_nchw(grad_out_in), w = as_nchw(w_in);
        write_nchw(grad_x_in, [&](const Tensor& grad_x) {
          const Geometry g = geometry(grad_x, w, grad_out, p);
          dispatch_floating(w.dtype(), "conv2d_backward_input",
                            [&](auto tag) { backward_input<typename decltype(tag)::type>(grad_out, w, g, grad_x); });
        });
      },
      [&] { return conv_operands(grad_x_in, w_in, grad_out_in, Tensor(), p); });
}

void conv2d_backward_weight(const Tensor& grad_out_in, const Tensor& x_in, const Conv2dParams& p,
                            const Tensor& grad_w_in) {
  run_conv(
      "conv2d_backward_weight", x_in.dtype(),
      [&](std::string& impl) { return onednn_conv2d_backward_weight(grad_out_in, x_in, p, grad_w_in, impl); },
      [&] {
        const Tensor grad_out = as_nchw(grad_out_in), x = as_nchw(x_in);
        write_nchw(grad_w_in, [&](const Tensor& grad_w) {
          const Geometry g = geometry(x, grad_w, grad_out, p);
          dispatch_floating(x.dtype(), "conv2d_backward_weight",
                            [&](auto tag) { backward_weight<typename decltype(tag)::type>(grad_out, x, g, grad_w); });
        });
      },
      [&] { return conv_operands(x_in, grad_w_in, grad_out_in, Tensor(), p); });
}

void register_conv() {
  backends::conv2d.set(DeviceType::CPU, conv2d);
  backends::conv2d_backward_input.set(DeviceType::CPU, conv2d_backward_input);
  backends::conv2d_backward_weight.set(DeviceType::CPU, conv2d_backward_weight);
}

}  // namespace mixtrain::backends::cpu
