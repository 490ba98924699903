// Host side of batch norm, group norm and layer norm on CUDA. The kernels take per-channel
// tensors (weight, bias, statistics, running statistics, affine gradients) in the stat dtype;
// tensors of another dtype are converted on the way in and written back on the way out.
#include "backends/norm.h"
#include "backends/copy.h"
#include "backends/cuda/context.h"
#include "backends/cuda/operands.h"
#include "kernels/cuda/norm.h"

namespace mixtrain::backends::cuda {

namespace {

DType stat_dtype(const Tensor& x) { return x.dtype() == kFloat64 ? kFloat64 : kFloat32; }

// A per-channel output in the stat dtype: `t` itself when it already is one, else a temporary
// that finish() copies into t.
class StatOut {
 public:
  StatOut(const Tensor& t, DType stat) : target_(t) {
    if (t.defined()) work_ = t.dtype() == stat && t.is_contiguous() ? t : Tensor::empty(t.shape(), TensorOptions(stat).device(t.device()));
  }
  // In-out tensors (running statistics) start from the target's values.
  StatOut& load() {
    if (work_.defined() && !work_.is_same(target_)) backends::copy(DeviceType::CUDA, target_, work_);
    return *this;
  }
  void* get() const { return ptr(work_); }
  void finish() const {
    if (work_.defined() && !work_.is_same(target_)) backends::copy(DeviceType::CUDA, work_, target_);
  }

 private:
  Tensor target_, work_;
};

void row_norm(const Tensor& x_in, const kernels::RowNormShape& sh, double eps, const Tensor& weight,
              const Tensor& bias, const Tensor& out, const Tensor& mean, const Tensor& rstd, const char* op) {
  check_device(op, out.device(), {&x_in, &weight, &bias, &mean, &rstd});
  const DType s = stat_dtype(x_in);
  const Tensor x = as_contiguous(x_in, x_in.dtype());
  const Tensor w = as_contiguous(weight, s), b = as_contiguous(bias, s);
  const StatOut m(mean, s), r(rstd, s);
  kernels::row_norm_forward(x.dtype(), x.raw_data(), sh, eps, ptr(w), ptr(b), out.raw_data(), m.get(), r.get(),
                            context(out).stream);
  m.finish();
  r.finish();
}

void row_norm_backward(const Tensor& x_in, const Tensor& grad_y, const kernels::RowNormShape& sh, const Tensor& mean,
                       const Tensor& rstd, const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                       const Tensor& grad_bias, const char* op) {
  check_device(op, x_in.device(), {&grad_y, &mean, &rstd, &weight, &grad_x, &grad_weight, &grad_bias});
  const DType s = stat_dtype(x_in);
  const Tensor x = as_contiguous(x_in, x_in.dtype()), g = as_contiguous(grad_y, x_in.dtype());
  const Tensor m = as_contiguous(mean, s), r = as_contiguous(rstd, s), w = as_contiguous(weight, s);
  const StatOut gw(grad_weight, s), gb(grad_bias, s);
  const size_t ws_bytes = kernels::row_norm_workspace_bytes(x.dtype(), sh);
  const Tensor ws = ws_bytes && (grad_weight.defined() || grad_bias.defined()) ? scratch(ws_bytes, x.device()) : Tensor();
  kernels::row_norm_backward(x.dtype(), x.raw_data(), g.raw_data(), sh, m.raw_data(), r.raw_data(), ptr(w),
                             ptr(grad_x), gw.get(), gb.get(), ptr(ws), context(x).stream);
  gw.finish();
  gb.finish();
}

}  // namespace

void batch_norm_stats(const Tensor& x_in, int64_t n, int64_t c, int64_t s, double eps, const Tensor& mean,
                                   const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var,
                                   double momentum) {
  check_device("batch_norm", x_in.device(), {&mean, &invstd, &running_mean, &running_var});
  const DType sd = stat_dtype(x_in);
  const Tensor x = as_contiguous(x_in, x_in.dtype());
  const StatOut m(mean, sd), is(invstd, sd);
  StatOut rm(running_mean, sd), rv(running_var, sd);
  rm.load();
  rv.load();
  const Tensor ws = scratch(kernels::batch_norm_workspace_bytes(x.dtype(), n, c, s), x.device());
  kernels::batch_norm_stats(x.dtype(), x.raw_data(), n, c, s, eps, m.get(), is.get(), rm.get(), rv.get(), momentum,
                            ws.raw_data(), context(x).stream);
  m.finish();
  is.finish();
  rm.finish();
  rv.finish();
}

void batch_norm(const Tensor& x_in, int64_t n, int64_t c, int64_t s, const Tensor& mean,
                             const Tensor& invstd, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  check_device("batch_norm", out.device(), {&x_in, &mean, &invstd, &weight, &bias});
  const DType sd = stat_dtype(x_in);
  const Tensor x = as_contiguous(x_in, x_in.dtype());
  const Tensor m = as_contiguous(mean, sd), is = as_contiguous(invstd, sd), w = as_contiguous(weight, sd),
               b = as_contiguous(bias, sd);
  kernels::batch_norm_apply(x.dtype(), x.raw_data(), n, c, s, m.raw_data(), is.raw_data(), ptr(w), ptr(b),
                            out.raw_data(), context(out).stream);
}

void batch_norm_backward(const Tensor& x_in, const Tensor& grad_y, int64_t n, int64_t c, int64_t s,
                                      const Tensor& mean, const Tensor& invstd, const Tensor& weight, bool batch_stats,
                                      const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
  check_device("batch_norm_backward", x_in.device(), {&grad_y, &mean, &invstd, &weight, &grad_x, &grad_weight, &grad_bias});
  const DType sd = stat_dtype(x_in);
  const Tensor x = as_contiguous(x_in, x_in.dtype()), g = as_contiguous(grad_y, x_in.dtype());
  const Tensor m = as_contiguous(mean, sd), is = as_contiguous(invstd, sd), w = as_contiguous(weight, sd);
  const StatOut gw(grad_weight, sd), gb(grad_bias, sd);
  const Tensor ws = scratch(kernels::batch_norm_workspace_bytes(x.dtype(), n, c, s), x.device());
  kernels::batch_norm_backward(x.dtype(), x.raw_data(), g.raw_data(), n, c, s, m.raw_data(), is.raw_data(), ptr(w),
                               batch_stats, ptr(grad_x), gw.get(), gb.get(), ws.raw_data(), context(x).stream);
  gw.finish();
  gb.finish();
}

void group_norm(const Tensor& x, int64_t n, int64_t c, int64_t s, int64_t groups, double eps,
                             const Tensor& weight, const Tensor& bias, const Tensor& out, const Tensor& mean,
                             const Tensor& rstd) {
  row_norm(x, {n * groups, c / groups * s, groups, s, c}, eps, weight, bias, out, mean, rstd, "group_norm");
}

void group_norm_backward(const Tensor& x, const Tensor& grad_y, int64_t n, int64_t c, int64_t s,
                                      int64_t groups, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                      const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
  row_norm_backward(x, grad_y, {n * groups, c / groups * s, groups, s, c}, mean, rstd, weight, grad_x, grad_weight,
                    grad_bias, "group_norm_backward");
}

void layer_norm(const Tensor& x, int64_t rows, int64_t cols, double eps, const Tensor& weight,
                             const Tensor& bias, const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  row_norm(x, {rows, cols, 1, 1, cols}, eps, weight, bias, out, mean, rstd, "layer_norm");
}

void layer_norm_backward(const Tensor& x, const Tensor& grad_y, int64_t rows, int64_t cols,
                                      const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                      const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
  row_norm_backward(x, grad_y, {rows, cols, 1, 1, cols}, mean, rstd, weight, grad_x, grad_weight, grad_bias,
                    "layer_norm_backward");
}

void register_norm() {
  backends::batch_norm_stats.set(DeviceType::CUDA, batch_norm_stats);
  backends::batch_norm.set(DeviceType::CUDA, batch_norm);
  backends::batch_norm_backward.set(DeviceType::CUDA, batch_norm_backward);
  backends::group_norm.set(DeviceType::CUDA, group_norm);
  backends::group_norm_backward.set(DeviceType::CUDA, group_norm_backward);
  backends::layer_norm.set(DeviceType::CUDA, layer_norm);
  backends::layer_norm_backward.set(DeviceType::CUDA, layer_norm_backward);
}

}  // namespace mixtrain::backends::cuda
