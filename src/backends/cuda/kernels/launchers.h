#pragma once
// The device half of the CUDA backend: the launchers of kernels/<family>.cu, called by the host
// half (backends/cuda/<family>.cpp), which turns tensors into these plain pointers, sizes and the
// op codes of backends/kernel_types.h. No Tensor here, so the .cu files stay light to compile.
// Every launcher enqueues on `stream` and checks the launch; none synchronises.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/kernel_types.h"
#include "mixtrain/core/dtype.h"

namespace mixtrain::kernels {

constexpr int kMaxDims = 12;

// N operands (operand 0 is the output) iterated over one shape, with the dimensions that are
// contiguous for every operand merged (the CUDA backend's make_iter builds it).
template <int N>
struct ElemIter {
  int ndim = 0;
  int64_t numel = 0;
  bool contiguous = false;  // one merged dimension, unit element stride for every operand
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};  // in bytes
  char* data[N] = {};
};

// ---- copy.cu
void copy(const ElemIter<2>& it, DType dst, DType src, cudaStream_t stream);
void fill(const ElemIter<1>& it, DType dtype, double value, cudaStream_t stream);

// ---- random.cu
void random(DType dtype, void* out, int64_t n, backends::RandomKind kind, uint64_t seed, uint64_t offset,
            cudaStream_t stream);
// out = x * (keep ? scale : 0), keep from the counter-based draws (backends::dropout); contiguous.
void dropout(DType dtype, const void* x, void* out, int64_t n, double p, uint64_t seed, uint64_t offset,
             cudaStream_t stream);

// ---- elementwise.cu
void unary(backends::UnaryOp op, DType dtype, const ElemIter<2>& it, double alpha, cudaStream_t stream);
// operands: grad_x, x, y, grad_y
void unary_backward(backends::UnaryOp op, DType dtype, const ElemIter<4>& it, double alpha, cudaStream_t stream);
void binary(backends::BinaryOp op, DType dtype, const ElemIter<3>& it, cudaStream_t stream);
void binary_scalar(backends::BinaryOp op, DType dtype, const ElemIter<2>& it, double s, bool scalar_first,
                   cudaStream_t stream);
void compare(backends::CompareOp op, DType dtype, const ElemIter<3>& it, cudaStream_t stream);
// operands: out, cond (bool), a, b
void where(DType dtype, const ElemIter<4>& it, cudaStream_t stream);

// ---- reduce.cu. x [outer, n, inner] contiguous -> out [outer, inner]; indices (may be null) get
// the argmax/argmin. workspace: reduce_workspace_bytes(...) bytes, or null when that is 0.
size_t reduce_workspace_bytes(DType in, int64_t outer, int64_t n, int64_t inner);
void reduce(backends::ReduceOp op, DType in, DType out_dtype, const void* x, void* out, int64_t* indices,
            int64_t outer, int64_t n, int64_t inner, void* workspace, cudaStream_t stream);

// ---- topk.cu. x [rows, n] contiguous -> values [rows, k] (dtype), indices [rows, k], in
// backends::topk's order. topk_backward zeroes grad_x [rows, n] and scatters grad [rows, k] into it.
void topk(DType dtype, const void* x, int64_t rows, int64_t n, int64_t k, bool largest, void* values, int64_t* indices,
          cudaStream_t stream);
void topk_backward(DType dtype, const void* grad, const int64_t* indices, int64_t rows, int64_t n, int64_t k,
                   void* grad_x, cudaStream_t stream);

// ---- softmax.cu. Over the middle axis of [outer, n, inner], one dtype for x and out.
// causal_rows: see backends::softmax (backends/softmax.h; rows only).
void softmax(DType dtype, const void* x, void* out, int64_t outer, int64_t n, int64_t inner, bool log, int64_t causal_rows,
             cudaStream_t stream);
void softmax_backward(DType dtype, const void* y, const void* grad_y, void* grad_x, int64_t outer, int64_t n,
                      int64_t inner, bool log, cudaStream_t stream);

// ---- attention.cu. Fused attention (backends/attention.h): q [B, L, E], k [B, S, E], v [B, S, Ev],
// out [B, L, Ev] contiguous in `dtype`; lse [B, L] and the backward's workspace
// (attention_workspace_bytes) in fp32, fp64 for fp64. Dropout as backends::AttentionShape's:
// probability (b, i, j) kept when dropout_keep(seed, offset + (b * l + i) * s + j, p).
struct AttentionDims {
  int64_t batch, l, s, e, ev;
  double scale;
  bool causal;
  double dropout_p;
  uint64_t seed, offset;
};
void attention_forward(DType dtype, const void* q, const void* k, const void* v, const AttentionDims& d, void* out,
                       void* lse, cudaStream_t stream);
size_t attention_workspace_bytes(DType dtype, const AttentionDims& d);
void attention_backward(DType dtype, const void* q, const void* k, const void* v, const void* out,
                        const void* grad_out, const void* lse, const AttentionDims& d, void* grad_q, void* grad_k,
                        void* grad_v, void* workspace, cudaStream_t stream);

// ---- loss.cu. workspace: kNllWorkspaceBytes of device memory. Targets out of range are skipped
// (the backend checks them first with check_indices).
constexpr size_t kNllWorkspaceBytes = 32;
void nll_loss(DType dtype, const void* logp, const int64_t* target, int64_t outer, int64_t classes, int64_t inner,
              const backends::NllLossArgs& args, void* loss, int64_t* count, void* workspace, cudaStream_t stream);
void nll_loss_backward(DType dtype, const int64_t* target, int64_t outer, int64_t classes, int64_t inner,
                       const backends::NllLossArgs& args, const void* grad_loss, const int64_t* count,
                       void* grad_logp, cudaStream_t stream);
// Sets *flag (device int) to 1 when an index lies outside [0, limit) and is not `allowed`.
void check_indices(const int64_t* idx, int64_t n, int64_t limit, int64_t allowed, int* flag, cudaStream_t stream);

// ---- norm.cu. Statistics in `stat` (fp32, or fp64 for fp64 data); per-channel affine tensors
// (weight, bias; null for none) and running statistics are in the stat dtype too.
struct RowNormShape {
  int64_t rows, len;   // x viewed as [rows, len]
  int64_t groups, s;   // element j of row r has channel (r % groups) * (len / s) + j / s
  int64_t channels;
};
void row_norm_forward(DType dtype, const void* x, const RowNormShape& sh, double eps, const void* weight,
                      const void* bias, void* out, void* mean, void* rstd, cudaStream_t stream);
// grad_x, grad_weight, grad_bias may be null. workspace: row_norm_workspace_bytes(...)
size_t row_norm_workspace_bytes(DType dtype, const RowNormShape& sh);
void row_norm_backward(DType dtype, const void* x, const void* grad_y, const RowNormShape& sh, const void* mean,
                       const void* rstd, const void* weight, void* grad_x, void* grad_weight, void* grad_bias,
                       void* workspace, cudaStream_t stream);
// ---- norm_batch.cu. Batch norm over [n, c, s]. running_* may be null.
size_t batch_norm_workspace_bytes(DType dtype, int64_t n, int64_t c, int64_t s);
void batch_norm_stats(DType dtype, const void* x, int64_t n, int64_t c, int64_t s, double eps, void* mean,
                      void* invstd, void* running_mean, void* running_var, double momentum, void* workspace,
                      cudaStream_t stream);
void batch_norm_apply(DType dtype, const void* x, int64_t n, int64_t c, int64_t s, const void* mean,
                      const void* invstd, const void* weight, const void* bias, void* out, cudaStream_t stream);
void batch_norm_backward(DType dtype, const void* x, const void* grad_y, int64_t n, int64_t c, int64_t s,
                         const void* mean, const void* invstd, const void* weight, bool batch_stats, void* grad_x,
                         void* grad_weight, void* grad_bias, void* workspace, cudaStream_t stream);

// ---- pool_upsample.cu. NCHW planes.
struct Planes {
  int64_t planes, h, w, ho, wo;  // N * C, input and output plane sizes
  int64_t channels_last = 0;     // C when the tensors are channels-last (max_pool2d only), else 0
};
void max_pool2d(DType dtype, const void* x, const Planes& p, const backends::Pool2dParams& q, void* out,
                int64_t* indices, cudaStream_t stream);
// accum: planes * h * w fp32 accumulators for half gradients, null for fp32/fp64.
void max_pool2d_backward(DType dtype, const void* grad_out, const int64_t* indices, const Planes& p, void* grad_x,
                         void* accum, cudaStream_t stream);
void upsample2d(DType dtype, const void* x, const Planes& p, const backends::Upsample2dParams& q, void* out,
                cudaStream_t stream);
void upsample2d_backward(DType dtype, const void* grad_out, const Planes& p, const backends::Upsample2dParams& q,
                         void* grad_x, void* accum, cudaStream_t stream);

// ---- embedding.cu. weight [v, d]; accum as for upsample (v * d accumulators, or null).
void embedding(DType dtype, const void* weight, const int64_t* idx, int64_t k, int64_t d, void* out,
               cudaStream_t stream);
void embedding_backward(DType dtype, const void* grad_out, const int64_t* idx, int64_t k, int64_t v, int64_t d,
                        int64_t padding_idx, void* grad_weight, void* accum, cudaStream_t stream);

// ---- amp.cu. One launch over a list of tensors: `meta` is device memory holding
// multi_tensor_meta_bytes(count, chunks) bytes filled by pack_multi_tensor_meta on the host.
struct TensorSpan {
  const void* in;
  void* out;
  int64_t n;
};
constexpr int64_t kAmpChunk = 1 << 16;  // elements per block
int64_t multi_tensor_chunks(const TensorSpan* spans, int count);
size_t multi_tensor_meta_bytes(int count, int64_t chunks);
void pack_multi_tensor_meta(const TensorSpan* spans, int count, void* host_buffer);
// Whether every span is aligned for the vectorized loop (pass the result as `vectorize`).
bool multi_tensor_vectorizable(const TensorSpan* spans, int count, DType grad, DType out);
void non_finite_check_and_unscale(DType grad, DType out, const void* meta_device, int count, int64_t chunks,
                                  bool vectorize, const float* inv_scale, float* found_inf, double* stats,
                                  cudaStream_t stream);
void update_scale(float* scale, int32_t* growth_tracker, int32_t* hysteresis_tracker, const float* found_inf,
                  const backends::ScaleUpdateArgs& args, float* at_min_scale, cudaStream_t stream);

// ---- optim.cu. weight/state dtype `w`, grad dtype `g`, half_out dtype `h` (ignored when null).
// found_inf / skipped_steps: a backends::StepGate's tensors, or null.
void adam_step(DType w, DType g, DType h, void* weight, const void* grad, void* exp_avg, void* exp_avg_sq,
               void* max_exp_avg_sq, void* half_out, int64_t n, const backends::AdamArgs& args,
               const float* found_inf, int32_t* skipped_steps, cudaStream_t stream);
void sgd_step(DType w, DType g, DType h, void* weight, const void* grad, void* momentum_buffer, void* half_out,
              int64_t n, const backends::SgdArgs& args, const float* found_inf, int32_t* skipped_steps,
              cudaStream_t stream);

// ---- fp8.cu (backends/fp8.h). src: n contiguous elements of `src_dtype` (fp32, fp16, bf16);
// dst: n bytes of `fp8` or null (statistics only); scale: one device float or null. amax (one
// device float, >= 0) becomes max(amax, max |src|), NaN ignored; saturated (one device int64) grows
// by the count of |src * scale| > max; either may be null.
void cast_to_fp8(DType src_dtype, const void* src, void* dst, int64_t n, DType fp8, const float* scale, bool saturate,
                 float* amax, int64_t* saturated, cudaStream_t stream);
// history [rows, k], scale [k], scale_inv [k] (k <= Fp8ScaleArgs::kMaxSlots), updated in place.
void fp8_update_scale(float* history, int64_t rows, int64_t k, float* scale, float* scale_inv,
                      const backends::Fp8ScaleArgs& args, cudaStream_t stream);

}  // namespace mixtrain::kernels
