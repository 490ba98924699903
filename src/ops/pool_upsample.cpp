// max_pool2d and 2-D upsampling (interpolate: nearest, bilinear). The ops work out the output
// sizes and the source-coordinate scales with PyTorch's rules, so the kernels only index.
#include <cmath>

#include "backends/pool_upsample.h"
#include "mixtrain/ops/nn_functional.h"
#include "ops/op_helpers.h"

namespace mixtrain::nn::functional {

using namespace mixtrain::ops;
using backends::Pool2dParams;
using backends::Upsample2dParams;
using backends::UpsampleMode;

namespace {

void check_image(const char* op, const Tensor& x) {
  check_defined(op, x, "input");
  check_floating(op, x);
  MT_CHECK(x.dim() == 4, op, ": expected input [N, C, H, W], got ", describe(x));
  MT_CHECK(x.size(2) >= 1 && x.size(3) >= 1, op, ": input ", describe(x), " has an empty image");
}

// PyTorch's pooling_output_shape: with ceil_mode the last window may hang over the end, but must
// start inside the input or its left padding.
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  if (span < 0) return 0;
  int64_t out = span / stride + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

}  // namespace

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, IntPair kernel_size,
                                                  std::optional<IntPair> stride_in, IntPair padding, IntPair dilation,
                                                  bool ceil_mode) {
  Tensor x = input;
  OpScope scope(OpId::max_pool2d, {&x});
  const char* op = "max_pool2d";
  check_image(op, x);
  const IntPair k = kernel_size, stride = stride_in.value_or(kernel_size);
  MT_CHECK(k.h >= 1 && k.w >= 1, op, ": kernel_size must be positive, got (", k.h, ", ", k.w, ")");
  MT_CHECK(stride.h >= 1 && stride.w >= 1, op, ": stride must be positive, got (", stride.h, ", ", stride.w, ")");
  MT_CHECK(dilation.h >= 1 && dilation.w >= 1, op, ": dilation must be positive, got (", dilation.h, ", ",
           dilation.w, ")");
  MT_CHECK(padding.h >= 0 && padding.w >= 0 && padding.h <= k.h / 2 && padding.w <= k.w / 2, op, ": padding (",
           padding.h, ", ", padding.w, ") must be non-negative and at most half the kernel size (", k.h, ", ", k.w,
           ")");
  const int64_t ho = pooled_size(x.size(2), k.h, padding.h, stride.h, dilation.h, ceil_mode);
  const int64_t wo = pooled_size(x.size(3), k.w, padding.w, stride.w, dilation.w, ceil_mode);
  MT_CHECK(ho >= 1 && wo >= 1, op, ": input ", describe(x), " is too small for kernel (", k.h, ", ", k.w,
           ") with dilation (", dilation.h, ", ", dilation.w, ") and padding (", padding.h, ", ", padding.w,
           "): output would be (", ho, ", ", wo, ")");
  Pool2dParams p;
  p.kernel_h = k.h, p.kernel_w = k.w, p.stride_h = stride.h, p.stride_w = stride.w;
  p.pad_h = padding.h, p.pad_w = padding.w, p.dilation_h = dilation.h, p.dilation_w = dilation.w;
  const Shape out_shape{x.size(0), x.size(1), ho, wo};
  // A channels-last input is pooled channels-last: output, indices (each a position in its
  // [H, W] plane, as in PyTorch) and input gradient keep the layout.
  const MemoryFormat f = x.suggest_memory_format();
  Tensor out = Tensor::empty(out_shape, x.options(), f);
  Tensor indices = Tensor::empty(out_shape, TensorOptions(kInt64).device(x.device()), f);
  {
    NoGradGuard no_grad;
    backends::max_pool2d(x, x.detach().contiguous(f), p, out, indices);
  }
  if (autograd::needs_grad({&x})) {
    const Shape xs = x.shape();
    // The indices are returned to the caller, so they are checked like any saved output.
    const autograd::SavedTensor indices_s = autograd::saved(indices, "output 1 (indices)");
    autograd::record("MaxPool2dBackward0", out, {&x}, [indices_s, xs, f](const TensorList& g) {
      Tensor gx = Tensor::empty(xs, g[0].options(), f);
      backends::max_pool2d_backward(gx, g[0].contiguous(f), indices_s, gx);
      return TensorList{gx};
    });
  }
  return {out, indices};
}

Tensor max_pool2d(const Tensor& input, IntPair kernel_size, std::optional<IntPair> stride, IntPair padding,
                  IntPair dilation, bool ceil_mode) {
  return max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode).first;
}

namespace {

// Source pixels per output pixel: 1 / scale_factor when the caller gave one, else in / out.
double ratio(int64_t in, int64_t out, std::optional<double> scale_factor) {
  return scale_factor ? 1.0 / *scale_factor : static_cast<double>(in) / static_cast<double>(out);
}

Tensor upsample(OpId id, const Tensor& input, IntPair size, Upsample2dParams p, std::optional<double> sh,
                std::optional<double> sw) {
  Tensor x = input;
  OpScope scope(id, {&x});
  const char* op = op_name(id);
  check_image(op, x);
  MT_CHECK(size.h >= 1 && size.w >= 1, op, ": output size must be positive, got (", size.h, ", ", size.w, ")");
  MT_CHECK((!sh || *sh > 0) && (!sw || *sw > 0), op, ": scale factors must be positive");
  const int64_t h = x.size(2), w = x.size(3);
  if (p.mode == UpsampleMode::Bilinear && p.align_corners) {
    // Corner pixels of input and output coincide; scale factors do not enter.
    p.scale_h = size.h > 1 ? static_cast<double>(h - 1) / static_cast<double>(size.h - 1) : 0.0;
    p.scale_w = size.w > 1 ? static_cast<double>(w - 1) / static_cast<double>(size.w - 1) : 0.0;
  } else {
    p.scale_h = ratio(h, size.h, sh);
    p.scale_w = ratio(w, size.w, sw);
  }
  Tensor out = new_empty({x.size(0), x.size(1), size.h, size.w}, x);
  backends::upsample2d(x, kernel_input(x), p, out);
  if (autograd::needs_grad({&x})) {
    const Shape xs = x.shape();
    autograd::record(p.mode == UpsampleMode::Nearest ? "UpsampleNearest2dBackward0" : "UpsampleBilinear2dBackward0", out,
                     {&x}, [p, xs](const TensorList& g) {
                       Tensor gx = Tensor::empty(xs, g[0].options());
                       backends::upsample2d_backward(gx, g[0].contiguous(), p, gx);
                       return TensorList{gx};
                     });
  }
  return out;
}

}  // namespace

Tensor upsample_nearest2d(const Tensor& input, IntPair output_size, std::optional<double> scales_h,
                          std::optional<double> scales_w) {
  Upsample2dParams p;
  p.mode = UpsampleMode::Nearest;
  return upsample(OpId::upsample_nearest2d, input, output_size, p, scales_h, scales_w);
}

Tensor upsample_bilinear2d(const Tensor& input, IntPair output_size, bool align_corners,
                           std::optional<double> scales_h, std::optional<double> scales_w) {
  Upsample2dParams p;
  p.mode = UpsampleMode::Bilinear;
  p.align_corners = align_corners;
  return upsample(OpId::upsample_bilinear2d, input, output_size, p, scales_h, scales_w);
}

Tensor interpolate(const Tensor& input, const InterpolateOptions& o) {
  check_image("interpolate", input);
  MT_CHECK(o.size().has_value() != o.scale_factor().has_value(),
           "interpolate: give exactly one of size and scale_factor");
  MT_CHECK(o.mode() == InterpolateMode::Bilinear || !o.align_corners().has_value(),
           "interpolate: align_corners can only be set with the bilinear mode");
  IntPair size = 1;
  std::optional<double> sh, sw;
  if (o.size()) {
    size = *o.size();
  } else {
    sh = o.scale_factor()->first, sw = o.scale_factor()->second;
    MT_CHECK(*sh > 0 && *sw > 0, "interpolate: scale_factor must be positive, got (", *sh, ", ", *sw, ")");
    size = IntPair(static_cast<int64_t>(std::floor(static_cast<double>(input.size(2)) * *sh)),
                   static_cast<int64_t>(std::floor(static_cast<double>(input.size(3)) * *sw)));
  }
  if (o.mode() == InterpolateMode::Nearest) return upsample_nearest2d(input, size, sh, sw);
  return upsample_bilinear2d(input, size, o.align_corners().value_or(false), sh, sw);
}

}  // namespace mixtrain::nn::functional
