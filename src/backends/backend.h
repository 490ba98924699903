#pragma once
// The kernel interface each backend implements (CPU on Eigen, CUDA on cuBLASLt/cuDNN and our
// kernels). The ops layer validates arguments, allocates outputs and records autograd; a backend
// only computes. Kernels are grouped by family so a new elementwise op is one enum value and one
// case per backend.
//
// Conventions: outputs are freshly allocated and contiguous unless said otherwise; inputs may be
// strided (broadcast inputs arrive as expanded views with stride 0). Inputs of one kernel call
// share one dtype (the ops layer casts first); half types compute in fp32 and round once.
#include <cstdint>
#include <vector>

#include "mixtrain/core/tensor.h"

namespace mixtrain::backends {

enum class UnaryOp : uint8_t { Neg, Exp, Log, Sqrt, Rsqrt, Tanh, Sigmoid, Relu, Gelu, Abs, Pow, Square };
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Pow, Maximum, Minimum };
enum class CompareOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };
enum class ReduceOp : uint8_t { Sum, Max, Min };

const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);

// The loss scaler's scale update (amp::GradScaler::update), as data so a device kernel can run
// it without a host round trip. Rule (PyTorch's, plus the opt-in extensions):
//   overflow: growth_tracker = 0; hysteresis_tracker = max(hysteresis_tracker - 1, 0); when it
//             reaches 0: at_min_scale = (min_scale > 0 && scale <= min_scale), and
//             scale = max(float(scale * backoff_factor), min_scale)
//   clean:    hysteresis_tracker = hysteresis; growth_tracker += 1; when it reaches
//             growth_interval: growth_tracker = 0 and scale = min(float(scale * growth_factor),
//             max_scale) if that is finite, else unchanged.
struct ScaleUpdateArgs {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t hysteresis = 1;  // 1: back off on every overflow (PyTorch)
  double min_scale = 0.0;  // 0: no floor
  double max_scale = 0.0;  // 0: no ceiling
};

// Element counts the check+unscale pass can gather in the same sweep, accumulated (max / add)
// into an fp64 tensor of kAmpStatsSize elements, so several calls (dtypes, optimizers) combine.
enum AmpStat : int { kAmpStatMaxAbs = 0, kAmpStatZeros = 1, kAmpStatFp16Subnormal = 2, kAmpStatElements = 3 };
constexpr int64_t kAmpStatsSize = 4;

struct NllLossArgs {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // dst = src elementwise, converting dtype; same shape, any strides on both.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;

  // out = op(x; alpha), alpha is the exponent for Pow.
  virtual void unary(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) = 0;
  // grad_x = grad_y * d op / dx, given the input x and the output y of the forward.
  virtual void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& grad_y,
                              const Tensor& grad_x, double alpha) = 0;
  // out = a op b; a and b already have out's shape (broadcast through zero strides).
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = a op s, or s op a when scalar_first.
  virtual void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out) = 0;
  // out (bool) = a cmp b, shapes as for binary.
  virtual void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = cond ? a : b; all of out's shape.
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = 0;

  // x viewed as [outer, reduce, inner] (contiguous); out [outer, inner] in out's dtype, which may
  // be wider than x's (sum with dtype=fp32). indices (int64, may be undefined) get the arg of Max/Min.
  virtual void reduce(ReduceOp op, const Tensor& x, int64_t outer, int64_t reduce, int64_t inner,
                      const Tensor& out, const Tensor& indices) = 0;

  // out = op(a) @ op(b) (+ bias broadcast over rows). a, b: [batch?, m, k] matrices whose last
  // two dims have one unit stride (either order). Half inputs: fp32 accumulate, round once.
  virtual void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& out,
                    const Tensor& bias) = 0;

  // Softmax over the middle axis of x viewed as [outer, n, inner] (contiguous); out may be wider.
  virtual void softmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log,
                       const Tensor& out) = 0;
  virtual void softmax_backward(const Tensor& y, const Tensor& grad_y, int64_t outer, int64_t n,
                                int64_t inner, bool log, const Tensor& grad_x) = 0;

  // logp viewed as [outer, classes, inner] (contiguous); target int64 [outer, inner]. Writes the
  // mean loss over non-ignored targets into loss (0-dim, logp's dtype) and their number into
  // count (0-dim int64). Device tensors both, so no host synchronisation is needed.
  virtual void nll_loss(const Tensor& logp, const Tensor& target, int64_t outer, int64_t classes,
                        int64_t inner, const NllLossArgs& args, const Tensor& loss,
                        const Tensor& count) = 0;
  // grad_logp = -grad_loss / count * ((1-eps) onehot + eps / classes) on non-ignored positions.
  virtual void nll_loss_backward(const Tensor& target, int64_t outer, int64_t classes, int64_t inner,
                                 const NllLossArgs& args, const Tensor& grad_loss, const Tensor& count,
                                 const Tensor& grad_logp) = 0;

  // AMP (amp::GradScaler). The defaults (src/backends/amp_fallback.cpp) copy through the host and
  // run the CPU kernels, so a new backend works before it has its own; the CPU backend overrides
  // them with fused loops and a device backend with kernels. Scalars live in device tensors, so
  // neither call needs a host synchronisation.
  //
  // One fused pass over a list of gradients of one dtype (outs: one dtype, fp32 or the grads'):
  // outs[i] = grads[i] * inv_scale (outs[i] may be grads[i]: in place; values are left as they are
  // when inv_scale == 1), and found_inf is set to 1 if any element is inf or NaN (never cleared:
  // the caller zeroes it, so buckets OR into one flag). inv_scale, found_inf: 0-dim fp32. stats:
  // undefined, or fp64 [kAmpStatsSize] accumulated over the scaled (input) values: max |g| over
  // finite elements, count of zeros, count with 0 < |g| < 2^-14 (subnormal in fp16), count.
  virtual void non_finite_check_and_unscale(const std::vector<Tensor>& grads, const std::vector<Tensor>& outs,
                                            const Tensor& inv_scale, const Tensor& found_inf, const Tensor& stats);
  // scale: 0-dim fp32; growth_tracker, hysteresis_tracker: 0-dim int32; found_inf: 0-dim fp32
  // (nonzero = overflow); at_min_scale: 0-dim fp32 set to 1 or 0 (see ScaleUpdateArgs).
  virtual void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& hysteresis_tracker,
                            const Tensor& found_inf, const ScaleUpdateArgs& args, const Tensor& at_min_scale);
};

// The backend of a device type; throws when that backend is not compiled in.
Backend& backend_for(DeviceType type);
inline Backend& backend_for(const Tensor& t) { return backend_for(t.device().type); }
void register_backend(DeviceType type, Backend* backend);

}  // namespace mixtrain::backends
