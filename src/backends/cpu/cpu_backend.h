#pragma once
// The CPU backend: Eigen for matrix products, plain loops (vectorized by the compiler, split by
// OpenMP) for the rest. fp16/bf16 are stored as such and computed in fp32, rounding once, which
// is what the GPU does, so AMP numerics can be tested here.
#include "backends/backend.h"

namespace mixtrain::backends::cpu {

class CpuBackend final : public Backend {
 public:
  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  void random(const Tensor& dst, RandomKind kind, uint64_t seed, uint64_t offset) override;
  void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out) override;
  void unary(UnaryOp op, const Tensor& x, const Tensor& out, double alpha) override;
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& grad_y, const Tensor& grad_x,
                      double alpha) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out) override;
  void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void reduce(ReduceOp op, const Tensor& x, int64_t outer, int64_t reduce, int64_t inner, const Tensor& out,
              const Tensor& indices) override;
  void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& out,
            const Tensor& bias, GemmEpilogue epilogue = GemmEpilogue::None) override;
  void softmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log, int64_t causal_rows,
               const Tensor& out) override;
  void softmax_backward(const Tensor& y, const Tensor& grad_y, int64_t outer, int64_t n, int64_t inner, bool log,
                        const Tensor& grad_x) override;
  void nll_loss(const Tensor& logp, const Tensor& target, int64_t outer, int64_t classes, int64_t inner,
                const NllLossArgs& args, const Tensor& loss, const Tensor& count) override;
  void nll_loss_backward(const Tensor& target, int64_t outer, int64_t classes, int64_t inner,
                         const NllLossArgs& args, const Tensor& grad_loss, const Tensor& count,
                         const Tensor& grad_logp) override;

  // conv.cpp: im2col + Eigen GEMM.
  void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out) override;
  void conv2d_backward_input(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p,
                             const Tensor& grad_x) override;
  void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p,
                              const Tensor& grad_w) override;
  // pool_upsample.cpp
  void max_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices) override;
  void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_x) override;
  void upsample2d(const Tensor& x, const Upsample2dParams& p, const Tensor& out) override;
  void upsample2d_backward(const Tensor& grad_out, const Upsample2dParams& p, const Tensor& grad_x) override;
  // norm.cpp
  void batch_norm_stats(const Tensor& x, int64_t n, int64_t c, int64_t s, double eps, const Tensor& mean,
                        const Tensor& invstd, const Tensor& running_mean, const Tensor& running_var,
                        double momentum) override;
  void batch_norm(const Tensor& x, int64_t n, int64_t c, int64_t s, const Tensor& mean, const Tensor& invstd,
                  const Tensor& weight, const Tensor& bias, const Tensor& out) override;
  void batch_norm_backward(const Tensor& x, const Tensor& grad_y, int64_t n, int64_t c, int64_t s, const Tensor& mean,
                           const Tensor& invstd, const Tensor& weight, bool batch_stats, const Tensor& grad_x,
                           const Tensor& grad_weight, const Tensor& grad_bias) override;
  void group_norm(const Tensor& x, int64_t n, int64_t c, int64_t s, int64_t groups, double eps, const Tensor& weight,
                  const Tensor& bias, const Tensor& out, const Tensor& mean, const Tensor& rstd) override;
  void group_norm_backward(const Tensor& x, const Tensor& grad_y, int64_t n, int64_t c, int64_t s, int64_t groups,
                           const Tensor& mean, const Tensor& rstd, const Tensor& weight, const Tensor& grad_x,
                           const Tensor& grad_weight, const Tensor& grad_bias) override;
  void layer_norm(const Tensor& x, int64_t rows, int64_t cols, double eps, const Tensor& weight, const Tensor& bias,
                  const Tensor& out, const Tensor& mean, const Tensor& rstd) override;
  void layer_norm_backward(const Tensor& x, const Tensor& grad_y, int64_t rows, int64_t cols, const Tensor& mean,
                           const Tensor& rstd, const Tensor& weight, const Tensor& grad_x, const Tensor& grad_weight,
                           const Tensor& grad_bias) override;
  // embedding.cpp
  void embedding(const Tensor& weight, const Tensor& indices, const Tensor& out) override;
  void embedding_backward(const Tensor& grad_out, const Tensor& indices, int64_t padding_idx,
                          const Tensor& grad_weight) override;
  void non_finite_check_and_unscale(const std::vector<Tensor>& grads, const std::vector<Tensor>& outs,
                                    const Tensor& inv_scale, const Tensor& found_inf, const Tensor& stats) override;
  void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& hysteresis_tracker,
                    const Tensor& found_inf, const ScaleUpdateArgs& args, const Tensor& at_min_scale) override;
  // optim_step.cpp
  void adam_step(const Tensor& weight, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const Tensor& half_out, const AdamArgs& args,
                 const StepGate& gate) override;
  void sgd_step(const Tensor& weight, const Tensor& grad, const Tensor& momentum_buffer, const Tensor& half_out,
                const SgdArgs& args, const StepGate& gate) override;
};

Backend& cpu_backend();

// The image kernels (convolution, pooling) compute NCHW; channels-last operands are copied
// around them (on the CPU the layout is a matter of agreement with the GPU, not of speed).
// as_nchw: t, or its contiguous copy. write_nchw: runs compute(out) on out itself when it is
// contiguous, else on a contiguous buffer that is then copied into out.
Tensor as_nchw(const Tensor& t);
template <class Compute>
void write_nchw(const Tensor& out, Compute&& compute) {
  if (out.is_contiguous()) return compute(out);
  const Tensor tmp = Tensor::empty(out.shape(), out.options());
  compute(tmp);
  cpu_backend().copy(tmp, out);
}

}  // namespace mixtrain::backends::cpu
