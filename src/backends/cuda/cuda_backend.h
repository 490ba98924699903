#pragma once
// The CUDA backend: GEMMs through cuBLASLt (gemm.cpp), convolutions through cuDNN (conv.cpp),
// everything else through our kernels (kernels/*.cu). Each method checks its operands' devices,
// turns tensors into the kernels' plain arguments and enqueues on the device's stream; only
// reading a value back to the host synchronises.
#include <array>

#include "backends/backend.h"
#include "kernel_api.h"

namespace mixtrain::backends::cuda {

class CudaBackend final : public Backend {
 public:
  // cuda_backend.cpp
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
  // gemm.cpp
  void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& out,
            const Tensor& bias, GemmEpilogue epilogue = GemmEpilogue::None) override;
  // reduce_softmax_loss.cpp
  void reduce(ReduceOp op, const Tensor& x, int64_t outer, int64_t reduce, int64_t inner, const Tensor& out,
              const Tensor& indices) override;
  void softmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log, int64_t causal_rows,
               const Tensor& out) override;
  void softmax_backward(const Tensor& y, const Tensor& grad_y, int64_t outer, int64_t n, int64_t inner, bool log,
                        const Tensor& grad_x) override;
  void nll_loss(const Tensor& logp, const Tensor& target, int64_t outer, int64_t classes, int64_t inner,
                const NllLossArgs& args, const Tensor& loss, const Tensor& count) override;
  void nll_loss_backward(const Tensor& target, int64_t outer, int64_t classes, int64_t inner,
                         const NllLossArgs& args, const Tensor& grad_loss, const Tensor& count,
                         const Tensor& grad_logp) override;
  // conv.cpp
  void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out) override;
  void conv2d_backward_input(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p,
                             const Tensor& grad_x) override;
  void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p,
                              const Tensor& grad_w) override;
  // pool_embedding.cpp
  void max_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices) override;
  void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Tensor& grad_x) override;
  void upsample2d(const Tensor& x, const Upsample2dParams& p, const Tensor& out) override;
  void upsample2d_backward(const Tensor& grad_out, const Upsample2dParams& p, const Tensor& grad_x) override;
  void embedding(const Tensor& weight, const Tensor& indices, const Tensor& out) override;
  void embedding_backward(const Tensor& grad_out, const Tensor& indices, int64_t padding_idx,
                          const Tensor& grad_weight) override;
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
  // amp_optim.cpp
  void non_finite_check_and_unscale(const std::vector<Tensor>& grads, const std::vector<Tensor>& outs,
                                    const Tensor& inv_scale, const Tensor& found_inf, const Tensor& stats) override;
  void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& hysteresis_tracker,
                    const Tensor& found_inf, const ScaleUpdateArgs& args, const Tensor& at_min_scale) override;
  void adam_step(const Tensor& weight, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const Tensor& half_out, const AdamArgs& args,
                 const StepGate& gate) override;
  void sgd_step(const Tensor& weight, const Tensor& grad, const Tensor& momentum_buffer, const Tensor& half_out,
                const SgdArgs& args, const StepGate& gate) override;
};

// Iteration over operands of out's shape (operand 0 is the output), dimensions merged where
// every operand allows. Checks that all operands are CUDA tensors of one device.
template <int N>
kernels::ElemIter<N> make_iter(const char* op, const std::array<const Tensor*, N>& operands);

// Checks that every defined tensor is on `device`, naming the op.
void check_device(const char* op, Device device, std::initializer_list<const Tensor*> tensors);

// Device pointer of a defined tensor, or nullptr for an undefined one.
inline void* ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// t as a contiguous tensor of dtype `dt` on its device: itself when it already is one, else a
// converted copy (undefined stays undefined).
Tensor as_contiguous(const Tensor& t, DType dt);
Tensor as_layout(const Tensor& t, DType dt, MemoryFormat format);  // 4-D for ChannelsLast
// The layout of an image kernel's call: its output's (written in place, so it cannot be
// converted), or, when the output fits both layouts (1x1 planes), that of the activation operand.
MemoryFormat layout_of(const char* op, const Tensor& out, const Tensor& activation);

Backend* cuda_backend();

}  // namespace mixtrain::backends::cuda
