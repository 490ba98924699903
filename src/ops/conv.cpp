// conv2d and conv_transpose2d. Both run on the three convolution kernels (forward, backward
// w.r.t. input, backward w.r.t. weight): a transposed convolution's forward is a convolution's
// input gradient and the other way round, so one set of kernels serves both ops and both passes.
//
// Layout: when the input or the weight is channels-last, the convolution runs channels-last
// (PyTorch's rule): its operands are given to the kernels in that layout and its output and input
// gradient keep it, so a channels-last network stays channels-last. The weight gradient is
// returned in the weight's own layout.
#include "backends/conv.h"
#include "backends/elementwise.h"
#include "mixtrain/ops/nn_functional.h"
#include "ops/op_helpers.h"

namespace mixtrain::nn::functional {

using namespace mixtrain::ops;
using backends::Conv2dParams;

namespace {

MemoryFormat conv_layout(const Tensor& x, const Tensor& w) {
  // cuDNN has no fp64 channels-last kernels to count on (PyTorch makes the same exception).
  if (x.device().is_cuda() && (x.dtype() == kFloat64 || w.dtype() == kFloat64)) return MemoryFormat::Contiguous;
  return x.suggest_memory_format() == MemoryFormat::ChannelsLast || w.suggest_memory_format() == MemoryFormat::ChannelsLast
             ? MemoryFormat::ChannelsLast
             : MemoryFormat::Contiguous;
}

// The weight gradient, computed in the convolution's layout, in the weight's own.
Tensor in_weight_layout(const Tensor& grad_w, MemoryFormat weight_format) {
  NoGradGuard no_grad;
  return grad_w.contiguous(weight_format);
}

struct ConvArgs {
  Tensor x, w, b;
};

void check_conv_args(const char* op, const ConvArgs& a, const char* weight_layout, IntPair stride, IntPair padding,
                     IntPair dilation, int64_t groups) {
  check_defined(op, a.x, "input");
  check_defined(op, a.w, "weight");
  check_floating(op, a.x);
  check_same_device(op, a.x, a.w);
  MT_CHECK(a.x.dtype() == a.w.dtype(), op, ": input ", describe(a.x), " and weight ", describe(a.w),
           " must have the same dtype (cast one, or run under autocast)");
  MT_CHECK(a.x.dim() == 4, op, ": expected input [N, C, H, W], got ", describe(a.x));
  MT_CHECK(a.w.dim() == 4, op, ": expected weight ", weight_layout, ", got ", describe(a.w));
  MT_CHECK(groups >= 1, op, ": groups must be positive, got ", groups);
  MT_CHECK(stride.h >= 1 && stride.w >= 1, op, ": stride must be positive, got (", stride.h, ", ", stride.w, ")");
  MT_CHECK(dilation.h >= 1 && dilation.w >= 1, op, ": dilation must be positive, got (", dilation.h, ", ", dilation.w,
           ")");
  MT_CHECK(padding.h >= 0 && padding.w >= 0, op, ": padding must be non-negative, got (", padding.h, ", ", padding.w,
           ")");
  MT_CHECK(a.w.size(2) >= 1 && a.w.size(3) >= 1, op, ": empty kernel in weight ", describe(a.w));
  if (a.b.defined()) {
    check_same_device(op, a.x, a.b);
    MT_CHECK(a.b.dtype() == a.x.dtype(), op, ": bias ", describe(a.b), " must have the input's dtype ", a.x.dtype());
  }
}

Conv2dParams params(IntPair stride, IntPair padding, IntPair dilation, int64_t groups) {
  Conv2dParams p;
  p.stride_h = stride.h, p.stride_w = stride.w;
  p.pad_h = padding.h, p.pad_w = padding.w;
  p.dilation_h = dilation.h, p.dilation_w = dilation.w;
  p.groups = groups;
  return p;
}

void check_bias(const char* op, const Tensor& b, int64_t channels) {
  if (!b.defined()) return;
  MT_CHECK(b.dim() == 1 && b.size(0) == channels, op, ": bias ", describe(b), " does not match the ", channels,
           " output channels");
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntPair stride, IntPair padding,
              IntPair dilation, int64_t groups) {
  ConvArgs a{input, weight, bias};
  OpScope scope(OpId::conv2d, {&a.x, &a.w, &a.b});
  const char* op = "conv2d";
  check_conv_args(op, a, "[Cout, C / groups, kh, kw]", stride, padding, dilation, groups);
  const Tensor &x = a.x, &w = a.w, &b = a.b;
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t co = w.size(0), kh = w.size(2), kw = w.size(3);
  MT_CHECK(c == w.size(1) * groups, op, ": input ", describe(x), " has ", c, " channels but weight ", describe(w),
           " with groups=", groups, " expects ", w.size(1) * groups);
  MT_CHECK(co % groups == 0, op, ": weight ", describe(w), " has ", co, " output channels, not divisible by groups=",
           groups);
  check_bias(op, b, co);
  const int64_t span_h = h + 2 * padding.h - dilation.h * (kh - 1) - 1;
  const int64_t span_w = wd + 2 * padding.w - dilation.w * (kw - 1) - 1;
  MT_CHECK(span_h >= 0 && span_w >= 0, op, ": input ", describe(x), " (padded by (", padding.h, ", ", padding.w,
           ")) is smaller than the dilated kernel of weight ", describe(w));
  const Conv2dParams p = params(stride, padding, dilation, groups);
  const MemoryFormat f = conv_layout(x, w), wf = w.suggest_memory_format();
  const Tensor xc = kernel_input(x, f), wc = kernel_input(w, f), bc = kernel_input(b);
  Tensor out = Tensor::empty({n, co, span_h / stride.h + 1, span_w / stride.w + 1}, x.options(), f);
  backends::conv2d(x, xc, wc, bc, p, out);
  if (autograd::needs_grad({&x, &w, &b})) {
    const bool gx = x.requires_grad(), gw = w.requires_grad(), gb = b.defined() && b.requires_grad();
    const autograd::SavedTensor x_s = gw ? autograd::saved(xc, "input 0 (input)") : autograd::SavedTensor(),
                                w_s = gx ? autograd::saved(wc, "input 1 (weight)") : autograd::SavedTensor();
    const Shape xs = x.shape(), ws = w.shape();
    autograd::record("Conv2dBackward0", {&out}, {&x, &w, &b},
                     [x_s, w_s, xs, ws, p, f, wf, gx, gw, gb](const TensorList& g) {
                       const Tensor go = g[0].contiguous(f);
                       TensorList r(3);
                       if (gx) {
                         r[0] = Tensor::empty(xs, go.options(), f);
                         backends::conv2d_backward_input(go, go, w_s, p, r[0]);
                       }
                       if (gw) {
                         r[1] = Tensor::empty(ws, go.options(), f);
                         backends::conv2d_backward_weight(go, go, x_s, p, r[1]);
                         r[1] = in_weight_layout(r[1], wf);
                       }
                       if (gb) r[2] = sum(go, {0, 2, 3});
                       return r;
                     });
  }
  return out;
}

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, IntPair stride,
                        IntPair padding, IntPair output_padding, int64_t groups, IntPair dilation) {
  ConvArgs a{input, weight, bias};
  OpScope scope(OpId::conv_transpose2d, {&a.x, &a.w, &a.b});
  const char* op = "conv_transpose2d";
  check_conv_args(op, a, "[C, Cout / groups, kh, kw]", stride, padding, dilation, groups);
  const Tensor &x = a.x, &w = a.w, &b = a.b;
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t kh = w.size(2), kw = w.size(3);
  MT_CHECK(c == w.size(0), op, ": input ", describe(x), " has ", c, " channels but weight ", describe(w), " expects ",
           w.size(0));
  MT_CHECK(c % groups == 0, op, ": input channels ", c, " are not divisible by groups=", groups);
  const int64_t co = w.size(1) * groups;
  check_bias(op, b, co);
  // PyTorch's rule: output_padding only picks among sizes that a strided or dilated conv2d would
  // map back to the input size.
  MT_CHECK(output_padding.h >= 0 && output_padding.w >= 0 &&
               (output_padding.h < stride.h || output_padding.h < dilation.h) &&
               (output_padding.w < stride.w || output_padding.w < dilation.w),
           op, ": output_padding (", output_padding.h, ", ", output_padding.w,
           ") must be smaller than either stride or dilation");
  const int64_t ho = (h - 1) * stride.h - 2 * padding.h + dilation.h * (kh - 1) + output_padding.h + 1;
  const int64_t wo = (wd - 1) * stride.w - 2 * padding.w + dilation.w * (kw - 1) + output_padding.w + 1;
  MT_CHECK(ho >= 1 && wo >= 1, op, ": input ", describe(x), " with padding (", padding.h, ", ", padding.w,
           ") gives an empty output (", ho, ", ", wo, ")");
  const Conv2dParams p = params(stride, padding, dilation, groups);
  const MemoryFormat f = conv_layout(x, w), wf = w.suggest_memory_format();
  const Tensor xc = kernel_input(x, f), wc = kernel_input(w, f);
  Tensor out = Tensor::empty({n, co, ho, wo}, x.options(), f);
  backends::conv2d_backward_input(x, xc, wc, p, out);
  if (b.defined()) {
    NoGradGuard no_grad;
    backends::binary(out, backends::BinaryOp::Add, out, b.detach().reshape({1, co, 1, 1}).expand(out.shape()), out);
  }
  if (autograd::needs_grad({&x, &w, &b})) {
    const bool gx = x.requires_grad(), gw = w.requires_grad(), gb = b.defined() && b.requires_grad();
    const autograd::SavedTensor x_s = gw ? autograd::saved(xc, "input 0 (input)") : autograd::SavedTensor(),
                                w_s = gx ? autograd::saved(wc, "input 1 (weight)") : autograd::SavedTensor();
    const Shape xs = x.shape(), ws = w.shape();
    autograd::record("ConvTranspose2dBackward0", {&out}, {&x, &w, &b},
                     [x_s, w_s, xs, ws, p, f, wf, gx, gw, gb](const TensorList& g) {
                       const Tensor go = g[0].contiguous(f);
                       TensorList r(3);
                       if (gx) {  // the adjoint of a transposed convolution is the convolution
                         r[0] = Tensor::empty(xs, go.options(), f);
                         backends::conv2d(go, go, w_s, Tensor(), p, r[0]);
                       }
                       if (gw) {
                         r[1] = Tensor::empty(ws, go.options(), f);
                         backends::conv2d_backward_weight(go, x_s, go, p, r[1]);
                         r[1] = in_weight_layout(r[1], wf);
                       }
                       if (gb) r[2] = sum(go, {0, 2, 3});
                       return r;
                     });
  }
  return out;
}

}  // namespace mixtrain::nn::functional
