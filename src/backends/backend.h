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
#include <utility>
#include <vector>

#include "backends/kernel_types.h"
#include "mixtrain/core/error.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain::backends {

// Lets a fused optimizer update decide on the device whether to run, so that GradScaler needs no
// host synchronisation (optim::Optimizer::step(found_inf)). When found_inf (0-dim fp32) is nonzero
// the update changes nothing but skipped_steps (0-dim int32), which it increments once. Otherwise
// it runs as step args.step - skipped_steps: args.step counts the attempts, the counter the skips.
// Both undefined: an ordinary update. skipped_steps alone: an ordinary update whose step count
// is corrected by the skips so far.
struct StepGate {
  Tensor found_inf;
  Tensor skipped_steps;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // dst = src elementwise, converting dtype; same shape, any strides on both.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;
  // dst (floating, contiguous) = draws of the counter-based generator (seed, offset): see
  // RandomKind. Values are computed in fp64 and rounded once to dst's dtype (through fp32 for
  // the half types, as copy() does), identically on every backend.
  virtual void random(const Tensor& dst, RandomKind kind, uint64_t seed, uint64_t offset) = 0;
  // Dropout's mask and scale in one pass: out = x * (keep ? T(1 / (1 - p)) : 0) with keep =
  // float(uniform draw offset + i) >= float(p), the scale rounded to x's dtype first. x and out
  // contiguous, one dtype. The mask is a pure function of (seed, offset, i), so backward applies
  // the same call to the gradient instead of saving a mask.
  virtual void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out) = 0;

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

  // out = epilogue(op(a) @ op(b) (+ bias broadcast over rows)). a, b: [batch?, m, k] matrices
  // whose last two dims have one unit stride (either order). Half inputs: fp32 accumulate, bias
  // and epilogue in fp32, round once (CUDA's fallback when cuBLASLt has no fused algorithm rounds
  // the product, then adds the bias). Relu matches unary(Relu), x <= 0 ? 0 : x, for every number;
  // a NaN pre-activation may come out as 0 on CUDA (cuBLASLt's ReLU is max(x, 0)).
  virtual void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& out,
                    const Tensor& bias, GemmEpilogue epilogue = GemmEpilogue::None) = 0;

  // Softmax over the middle axis of x viewed as [outer, n, inner] (contiguous); out has x's dtype
  // (half: fp32 arithmetic, rounded once). causal_rows > 0 (softmax over rows, inner == 1): row r
  // takes only entries j <= r % causal_rows and writes 0 beyond, the causal attention mask of
  // [..., L = causal_rows, S] scores without a mask tensor or an extra pass.
  virtual void softmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log, int64_t causal_rows,
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
  // One fused pass over a list of gradients of one dtype (outs: one dtype, the grads' or, for half grads, fp32):
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
  // ---- Kernels added for the model ops. Each has a default that throws, so a backend that
  // does not have one yet still builds and says clearly what is missing. Inputs are contiguous;
  // "stat" tensors are fp32 for fp16/bf16/fp32 inputs and fp64 for fp64 inputs.

  // out [N, Cout, Ho, Wo] = conv(x, w) (+ bias [Cout], may be undefined).
  virtual void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p,
                      const Tensor& out) {
    not_implemented("conv2d");
  }
  // grad_x (its shape gives H, W) = the adjoint of conv2d w.r.t. x applied to grad_out; this is
  // also the forward of conv_transpose2d.
  virtual void conv2d_backward_input(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p,
                                     const Tensor& grad_x) {
    not_implemented("conv2d_backward_input");
  }
  // grad_w [Cout, C/groups, kh, kw] = sum over the batch of grad_out (x) im2col(x).
  virtual void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p,
                                      const Tensor& grad_w) {
    not_implemented("conv2d_backward_weight");
  }

  // out, indices [N, C, Ho, Wo]; indices (int64) are flat positions h * W + w in the input plane.
  virtual void max_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices) {
    not_implemented("max_pool2d");
  }
  // grad_x = scatter-add of grad_out at indices (overwrites grad_x).
  virtual void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_x) {
    not_implemented("max_pool2d_backward");
  }

  // x [N, C, H, W] -> out [N, C, Ho, Wo].
  virtual void upsample2d(const Tensor& x, const Upsample2dParams& p, const Tensor& out) {
    not_implemented("upsample2d");
  }
  // grad_x (overwritten) = adjoint of upsample2d applied to grad_out.
  virtual void upsample2d_backward(const Tensor& grad_out, const Upsample2dParams& p, const Tensor& grad_x) {
    not_implemented("upsample2d_backward");
  }

  // Batch norm over x viewed as [N, C, S]. Per channel: mean and invstd = 1/sqrt(var + eps) with
  // the biased variance, into stat tensors [C]. When running_mean/var are defined (any floating
  // dtype) they are updated in place: r = (1 - momentum) r + momentum * stat, with the unbiased
  // variance.
  virtual void batch_norm_stats(const Tensor& x, int64_t n, int64_t c, int64_t s, double eps, const Tensor& mean,
                                const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var,
                                double momentum) {
    not_implemented("batch_norm_stats");
  }
  // out = (x - mean[c]) * invstd[c] * weight[c] + bias[c]; weight and bias may be undefined or of
  // x's dtype or fp32.
  virtual void batch_norm(const Tensor& x, int64_t n, int64_t c, int64_t s, const Tensor& mean, const Tensor& invstd,
                          const Tensor& weight, const Tensor& bias, const Tensor& out) {
    not_implemented("batch_norm");
  }
  // With batch_stats (training) the gradient flows through mean and invstd too; without, they are
  // constants (eval). Any of grad_x, grad_weight, grad_bias may be undefined (not wanted).
  virtual void batch_norm_backward(const Tensor& x, const Tensor& grad_y, int64_t n, int64_t c, int64_t s,
                                   const Tensor& mean, const Tensor& invstd, const Tensor& weight, bool batch_stats,
                                   const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
    not_implemented("batch_norm_backward");
  }

  // Group norm over x viewed as [N, G, C/G, S]: statistics per (n, g) into mean, rstd [N, G]
  // (stat dtype), affine per channel. weight/bias as for batch_norm.
  virtual void group_norm(const Tensor& x, int64_t n, int64_t c, int64_t s, int64_t groups, double eps,
                          const Tensor& weight, const Tensor& bias, const Tensor& out, const Tensor& mean,
                          const Tensor& rstd) {
    not_implemented("group_norm");
  }
  virtual void group_norm_backward(const Tensor& x, const Tensor& grad_y, int64_t n, int64_t c, int64_t s,
                                   int64_t groups, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                                   const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
    not_implemented("group_norm_backward");
  }
  // Layer norm over x viewed as [rows, cols]: statistics per row into mean, rstd [rows], affine
  // per column.
  virtual void layer_norm(const Tensor& x, int64_t rows, int64_t cols, double eps, const Tensor& weight,
                          const Tensor& bias, const Tensor& out, const Tensor& mean, const Tensor& rstd) {
    not_implemented("layer_norm");
  }
  virtual void layer_norm_backward(const Tensor& x, const Tensor& grad_y, int64_t rows, int64_t cols,
                                   const Tensor& mean, const Tensor& rstd, const Tensor& weight, const Tensor& grad_x,
                                   const Tensor& grad_weight, const Tensor& grad_bias) {
    not_implemented("layer_norm_backward");
  }

  // out [K, D] = weight[indices[k]] for indices (int64, K of them) and weight [V, D]. Throws on
  // an index outside [0, V).
  virtual void embedding(const Tensor& weight, const Tensor& indices, const Tensor& out) {
    not_implemented("embedding");
  }
  // grad_weight [V, D] (overwritten) = scatter-add of grad_out rows at indices, skipping padding_idx.
  virtual void embedding_backward(const Tensor& grad_out, const Tensor& indices, int64_t padding_idx,
                                  const Tensor& grad_weight) {
    not_implemented("embedding_backward");
  }

  // The optimizers' fused element-wise updates (one pass reads weight, grad and state, writes them
  // back). weight and the state tensors share a dtype; grad has the weight's dtype or, for an
  // fp32 master weight, the half parameter's; half_out (may be undefined) receives the updated
  // weight rounded to its half dtype. All contiguous, one shape, on this backend's device.
  // `gate` (see StepGate) may skip the update on the device.
  virtual void adam_step(const Tensor& weight, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                         const Tensor& max_exp_avg_sq, const Tensor& half_out, const AdamArgs& args,
                         const StepGate& gate) {
    not_implemented("adam_step");
  }
  virtual void sgd_step(const Tensor& weight, const Tensor& grad, const Tensor& momentum_buffer,
                        const Tensor& half_out, const SgdArgs& args, const StepGate& gate) {
    not_implemented("sgd_step");
  }

 protected:
  [[noreturn]] static void not_implemented(const char* kernel) {
    MT_ERROR(kernel, ": not implemented on this backend");
  }
};

// non_finite_check_and_unscale's arguments, checked (the message names what is wrong), as
// contiguous work lists for the kernels: strided gradients are copied, and strided outputs get a
// contiguous work tensor that the backend copies back into them afterwards (copy_back).
struct UnscaleWork {
  std::vector<Tensor> grads, outs;
  std::vector<std::pair<Tensor, Tensor>> copy_back;  // (work tensor, the caller's output)
  DType grad_dtype = DType::Float32, out_dtype = DType::Float32;
};
UnscaleWork prepare_unscale(const std::vector<Tensor>& grads, const std::vector<Tensor>& outs,
                            const Tensor& inv_scale, const Tensor& found_inf, const Tensor& stats);
void check_update_scale_args(const Tensor& scale, const Tensor& growth_tracker, const Tensor& hysteresis_tracker,
                             const Tensor& found_inf, const Tensor& at_min_scale);

// The backend of a device type; throws when that backend is not compiled in.
Backend& backend_for(DeviceType type);
inline Backend& backend_for(const Tensor& t) { return backend_for(t.device().type); }
void register_backend(DeviceType type, Backend* backend);

}  // namespace mixtrain::backends
