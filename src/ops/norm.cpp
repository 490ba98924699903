// batch_norm, group_norm and layer_norm. Statistics are kept in the stat dtype (fp32 for half
// inputs, fp64 for fp64) whatever autocast does: batch_norm is Passthrough under autocast, so a
// half activation reaches it as is, and its running statistics must stay fp32.
#include "backends/norm.h"
#include "mixtrain/ops/nn_functional.h"
#include "ops/op_helpers.h"

namespace mixtrain::nn::functional {

using namespace mixtrain::ops;

namespace {

DType stat_dtype(DType x) { return x == kFloat64 ? kFloat64 : kFloat32; }

// weight / bias: undefined, or `shape` in the input's dtype, or fp32 with a half input.
void check_affine(const char* op, const Tensor& x, const Tensor& t, const char* what, const Shape& shape) {
  if (!t.defined()) return;
  check_same_device(op, x, t);
  MT_CHECK(t.shape() == shape, op, ": ", what, " ", describe(t), " must have shape ", shape_str(shape), " for input ",
           describe(x));
  MT_CHECK(t.dtype() == x.dtype() || (is_half(x.dtype()) && t.dtype() == kFloat32), op, ": ", what, " ", describe(t),
           " must have the input's dtype ", x.dtype(), is_half(x.dtype()) ? " or float32" : "");
}

void check_input(const char* op, const Tensor& x, int64_t min_dim, const char* layout) {
  check_defined(op, x, "input");
  check_floating(op, x);
  MT_CHECK(x.dim() >= min_dim, op, ": expected input ", layout, ", got ", describe(x));
}

// A gradient buffer for the backward kernels, or undefined when that gradient is not wanted.
Tensor grad_buffer(bool wanted, const Shape& shape, const TensorOptions& options) {
  return wanted ? Tensor::empty(shape, options) : Tensor();
}

TensorOptions options_of(const Tensor& t) { return t.defined() ? t.options() : TensorOptions(); }

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  Tensor x = input, w = weight, b = bias;
  OpScope scope(OpId::batch_norm, {&x, &w, &b});
  const char* op = "batch_norm";
  check_input(op, x, 2, "[N, C, *]");
  // Channels-last: the kernels see the memory as [N * H * W, C, 1] (the permuted, contiguous
  // view), which is the same reduction per channel.
  const MemoryFormat f = x.suggest_memory_format();
  const bool nhwc = f == MemoryFormat::ChannelsLast;
  const int64_t c = x.size(1), n = nhwc ? x.numel() / std::max<int64_t>(1, c) : x.size(0),
                s = nhwc ? 1 : x.numel() / std::max<int64_t>(1, x.size(0) * c);
  check_affine(op, x, w, "weight", {c});
  check_affine(op, x, b, "bias", {c});
  for (const Tensor* r : {&running_mean, &running_var}) {
    if (!r->defined()) continue;
    check_same_device(op, x, *r);
    MT_CHECK(is_floating(r->dtype()) && r->shape() == Shape{c} && r->is_contiguous(), op, ": running statistics ",
             describe(*r), " must be contiguous floating tensors of shape [", c, "]");
    MT_CHECK(!r->requires_grad(), op, ": running statistics are buffers and cannot require grad");
  }
  MT_CHECK(training || (running_mean.defined() && running_var.defined()), op,
           ": running_mean and running_var are needed when not training");
  MT_CHECK(!training || n * s > 1, op, ": expected more than 1 value per channel when training, got input ",
           describe(x));
  MT_CHECK(eps >= 0, op, ": eps must be non-negative, got ", eps);

  const DType st = stat_dtype(x.dtype());
  auto kernel_view = [nhwc](const Tensor& t) {
    NoGradGuard no_grad;
    return nhwc ? t.detach().contiguous(MemoryFormat::ChannelsLast).permute({0, 2, 3, 1}) : kernel_input(t);
  };
  const Tensor xc = kernel_view(x);
  const Tensor wc = kernel_input(w), bc = kernel_input(b);
  Tensor mean, invstd;
  if (training) {
    mean = new_empty({c}, x, st);
    invstd = new_empty({c}, x, st);
    backends::batch_norm_stats(x, xc, n, c, s, eps, mean, invstd, running_mean, running_var, momentum);
    for (const Tensor* r : {&running_mean, &running_var})
      if (r->defined()) r->bump_version();
  } else {
    NoGradGuard no_grad;
    // A copy: backward must see these values even if the buffers are updated in the meantime.
    mean = running_mean.detach().to(st).clone();
    invstd = rsqrt(add(running_var.detach().to(st), eps)).contiguous();
  }
  Tensor out = Tensor::empty(x.shape(), x.options(), f);
  backends::batch_norm(x, xc, n, c, s, mean, invstd, wc, bc, kernel_view(out));
  if (autograd::needs_grad({&x, &w, &b})) {
    const bool gx = x.requires_grad(), gw = w.defined() && w.requires_grad(), gb = b.defined() && b.requires_grad();
    const Shape xs = x.shape();
    const TensorOptions wo = options_of(w), bo = options_of(b);
    // mean and invstd are the op's own (nothing else can write them); x and w are checked.
    const autograd::SavedTensor xc_s = autograd::saved(xc, "input 0 (input)"), wc_s = autograd::saved(wc, "input 1 (weight)");
    autograd::record("BatchNormBackward0", {&out}, {&x, &w, &b}, [=](const TensorList& g) {
      TensorList r{gx ? Tensor::empty(xs, g[0].options(), f) : Tensor(), grad_buffer(gw, {c}, wo), grad_buffer(gb, {c}, bo)};
      backends::batch_norm_backward(g[0], xc_s, kernel_view(g[0]), n, c, s, mean, invstd, wc_s, training,
                                          gx ? kernel_view(r[0]) : Tensor(), r[1], r[2]);
      return r;
    });
  }
  return out;
}

Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor x = input, w = weight, b = bias;
  OpScope scope(OpId::group_norm, {&x, &w, &b});
  const char* op = "group_norm";
  check_input(op, x, 2, "[N, C, *]");
  const int64_t n = x.size(0), c = x.size(1), s = x.numel() / std::max<int64_t>(1, n * c);
  MT_CHECK(num_groups >= 1 && c % num_groups == 0, op, ": ", c, " channels of input ", describe(x),
           " cannot be split into ", num_groups, " groups");
  check_affine(op, x, w, "weight", {c});
  check_affine(op, x, b, "bias", {c});
  MT_CHECK(eps >= 0, op, ": eps must be non-negative, got ", eps);
  const DType st = stat_dtype(x.dtype());
  const Tensor xc = kernel_input(x), wc = kernel_input(w), bc = kernel_input(b);
  Tensor out = new_empty(x.shape(), x);
  Tensor mean = new_empty({n, num_groups}, x, st), rstd = new_empty({n, num_groups}, x, st);
  backends::group_norm(x, xc, n, c, s, num_groups, eps, wc, bc, out, mean, rstd);
  if (autograd::needs_grad({&x, &w, &b})) {
    const bool gx = x.requires_grad(), gw = w.defined() && w.requires_grad(), gb = b.defined() && b.requires_grad();
    const Shape xs = x.shape();
    const TensorOptions wo = options_of(w), bo = options_of(b);
    const autograd::SavedTensor xc_s = autograd::saved(xc, "input 0 (input)"), wc_s = autograd::saved(wc, "input 1 (weight)");
    autograd::record("GroupNormBackward0", {&out}, {&x, &w, &b}, [=](const TensorList& g) {
      TensorList r{grad_buffer(gx, xs, g[0].options()), grad_buffer(gw, {c}, wo), grad_buffer(gb, {c}, bo)};
      backends::group_norm_backward(g[0], xc_s, g[0].contiguous(), n, c, s, num_groups, mean, rstd, wc_s, r[0], r[1], r[2]);
      return r;
    });
  }
  return out;
}

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  Tensor x = input, w = weight, b = bias;
  OpScope scope(OpId::layer_norm, {&x, &w, &b});
  const char* op = "layer_norm";
  check_input(op, x, 1, "[*, normalized_shape]");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  MT_CHECK(k >= 1 && k <= x.dim() &&
               Shape(x.shape().end() - k, x.shape().end()) == normalized_shape,
           op, ": normalized_shape ", shape_str(normalized_shape), " does not match the trailing dimensions of input ",
           describe(x));
  check_affine(op, x, w, "weight", normalized_shape);
  check_affine(op, x, b, "bias", normalized_shape);
  MT_CHECK(eps >= 0, op, ": eps must be non-negative, got ", eps);
  const int64_t cols = shape_numel(normalized_shape), rows = cols ? x.numel() / cols : 0;
  const DType st = stat_dtype(x.dtype());
  const Tensor xc = kernel_input(x), wc = kernel_input(w), bc = kernel_input(b);
  Tensor out = new_empty(x.shape(), x);
  Tensor mean = new_empty({rows}, x, st), rstd = new_empty({rows}, x, st);
  backends::layer_norm(x, xc, rows, cols, eps, wc, bc, out, mean, rstd);
  if (autograd::needs_grad({&x, &w, &b})) {
    const bool gx = x.requires_grad(), gw = w.defined() && w.requires_grad(), gb = b.defined() && b.requires_grad();
    const Shape xs = x.shape(), ps = normalized_shape;
    const TensorOptions wo = options_of(w), bo = options_of(b);
    const autograd::SavedTensor xc_s = autograd::saved(xc, "input 0 (input)"), wc_s = autograd::saved(wc, "input 1 (weight)");
    autograd::record("LayerNormBackward0", {&out}, {&x, &w, &b}, [=](const TensorList& g) {
      TensorList r{grad_buffer(gx, xs, g[0].options()), grad_buffer(gw, ps, wo), grad_buffer(gb, ps, bo)};
      backends::layer_norm_backward(g[0], xc_s, g[0].contiguous(), rows, cols, mean, rstd, wc_s, r[0], r[1], r[2]);
      return r;
    });
  }
  return out;
}

}  // namespace mixtrain::nn::functional
