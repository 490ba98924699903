// The CUDA kernels' workspace, as a dry run records it (backends/workspace.h): cuBLASLt's,
// held by each device's context for the process's life, the small buffers of the loss and
// attention kernels, the layout copies of scaled_mm and cuDNN's workspace where a GPU can say
// how much. Built in every build, CUDA or not: nothing here calls CUDA, except through the conv
// kernel registry where a GPU is present.
#include "backends/cuda/workspace.h"

#include "backends/workspace.h"
#include "mixtrain/base/device.h"
#include "mixtrain/memory/dry_run.h"

namespace mixtrain::backends::cuda {

namespace {

void gemm_workspace(const Tensor&, bool, const Tensor&, bool, const Tensor&, const Tensor&, GemmEpilogue) {
  memory::hold_workspace("cublaslt", kGemmWorkspaceBytes);
}

// The backward takes rowsum(dO * O) per query (attention.cpp).
void attention_backward_workspace(const Tensor& q, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  const Tensor&, const AttentionShape& sh, const Tensor&, const Tensor&,
                                  const Tensor&) {
  const size_t bytes = attention_workspace_bytes(q.dtype(), sh.batch, sh.l);
  if (bytes > 0) memory::end_workspace(memory::begin_workspace(bytes));
}

// cuBLASLt's workspace, and a copy into the TN layout (fp8.cpp) of an operand that is not in it:
// a must be row-major, b column-major.
void scaled_mm_workspace(const Tensor& a, const Tensor& b, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&) {
  memory::hold_workspace("cublaslt", kGemmWorkspaceBytes);
  auto bytes = [](int64_t n) { return static_cast<size_t>(n); };
  const bool a_ok = a.stride(1) == 1 || a.size(1) == 1, b_ok = b.stride(0) == 1 || b.size(0) == 1;
  const int64_t ia = a_ok ? -1 : memory::begin_workspace(bytes(a.numel()));
  const int64_t ib = b_ok ? -1 : memory::begin_workspace(bytes(b.numel()));
  memory::end_workspace(ib);
  memory::end_workspace(ia);
}

// The int flag of the target range check and the kernel's workspace, for the call (loss.cpp).
void nll_loss_workspace(const Tensor&, const Tensor&, int64_t, int64_t, int64_t, const NllLossArgs&, const Tensor&,
                        const Tensor&) {
  const int64_t flag = memory::begin_workspace(sizeof(int));
  memory::end_workspace(memory::begin_workspace(kNllWorkspaceBytes));
  memory::end_workspace(flag);
}

// cuDNN's workspace for this shape: what the backend's algorithm choice would take (conv.cpp),
// asked only where a GPU can answer; without one it is not modelled (docs/MEMORY.md).
void conv_workspace(ConvDirection d, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  if (!mixtrain::cuda::is_available() || !conv2d_workspace_bytes.has(DeviceType::CUDA)) return;
  size_t bytes = 0;
  conv2d_workspace_bytes(DeviceType::CUDA, d, x, w, y, p, memory::dry_run_target().index, &bytes);
  if (bytes > 0) memory::end_workspace(memory::begin_workspace(bytes));
}

void conv2d_workspace(const Tensor& x, const Tensor& w, const Tensor&, const Conv2dParams& p, const Tensor& out) {
  conv_workspace(ConvDirection::Forward, x, w, out, p);
}

void conv2d_backward_input_workspace(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p,
                                     const Tensor& grad_x) {
  conv_workspace(ConvDirection::BackwardInput, grad_x, w, grad_out, p);
}

void conv2d_backward_weight_workspace(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p,
                                      const Tensor& grad_w) {
  conv_workspace(ConvDirection::BackwardWeight, x, grad_w, grad_out, p);
}

}  // namespace

const KernelWorkspace& kernel_workspace() {
  static constexpr KernelWorkspace answers{gemm_workspace,
                                           scaled_mm_workspace,
                                           nullptr,  // attention_forward takes none
                                           attention_backward_workspace,
                                           nll_loss_workspace,
                                           conv2d_workspace,
                                           conv2d_backward_input_workspace,
                                           conv2d_backward_weight_workspace};
  return answers;
}

}  // namespace mixtrain::backends::cuda
