// The meta backend's registration: every family's kernels do nothing on meta tensors (the ops
// have allocated the outputs; there are no values). The GEMM, NLL-loss, fused attention and
// convolution kernels also tell a running dry run about the scratch the target's backend would
// take for them: for CUDA (cuda/context.cpp, loss.cpp, attention.cpp, conv.cpp) cuBLASLt's
// workspace, held by the device context for the process's life, the loss and attention kernels'
// small scratch buffers, and cuDNN's workspace where a GPU can say how much; for the CPU, the
// fp32 copies its half-precision GEMM and fused attention work on. Other kernels' internal
// scratch is not modelled (docs/MEMORY.md).
#include "backends/attention.h"
#include "backends/conv.h"
#include "backends/cpu/gemm_bf16.h"
#include "backends/cpu/onednn/onednn.h"
#include "backends/families.h"
#include "backends/fp8.h"
#include "backends/kernel.h"
#include "backends/loss.h"
#include "backends/matmul.h"
#include "backends/meta/meta_backend.h"
#include "mixtrain/memory/dry_run.h"

namespace mixtrain::backends::meta {

namespace {

constexpr size_t kCudaGemmWorkspaceBytes = size_t{32} << 20;  // cuda/context.cpp kGemmWorkspaceBytes
constexpr size_t kCudaNllWorkspaceBytes = 32;                 // cuda/kernels/launchers.h kNllWorkspaceBytes

bool cuda_target() { return memory::recording() && memory::dry_run_target().is_cuda(); }

// The CPU's half-precision GEMM widens its operands and accumulates into an fp32 product
// (cpu/matmul.cpp), four buffers alive for the call; fp32/fp64 products need none. bf16 products
// on the vdpbf16ps kernel (cpu/gemm_bf16.h) widen only the bias and take the fp32 product; on
// oneDNN (cpu/onednn/onednn.h) they take none.
void cpu_half_gemm_scratch(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& out,
                           const Tensor& bias, GemmEpilogue epilogue) {
  if (backends::cpu::onednn_takes_gemm(a, trans_a, b, trans_b, out, bias, epilogue)) return;
  const bool bf16_kernel =
      a.dtype() == kBFloat16 && b.dtype() == kBFloat16 && backends::cpu::bf16_gemm_enabled();
  const Tensor none;
  int64_t ids[4];
  int n = 0;
  for (const Tensor* t : {bf16_kernel ? &none : &a, bf16_kernel ? &none : &b, &bias, &out})
    if (t->defined()) ids[n++] = memory::begin_workspace(static_cast<size_t>(t->numel()) * 4);
  while (n > 0) memory::end_workspace(ids[--n]);
}

void gemm_meta(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& out, const Tensor& bias,
               GemmEpilogue epilogue) {
  if (!memory::recording()) return;
  if (memory::dry_run_target().is_cuda())
    memory::hold_workspace("cublaslt", kCudaGemmWorkspaceBytes);
  else if (is_half(a.dtype()))
    cpu_half_gemm_scratch(a, trans_a, b, trans_b, out, bias, epilogue);
}

// The CPU's fused attention widens half operands into fp32 copies from the allocator
// (cpu/attention.cpp), alive for the call.
void cpu_half_attention_scratch(std::initializer_list<const Tensor*> operands) {
  if (!memory::recording() || memory::dry_run_target().is_cuda() || !is_half((*operands.begin())->dtype())) return;
  int64_t ids[5];
  int n = 0;
  for (const Tensor* t : operands) ids[n++] = memory::begin_workspace(static_cast<size_t>(t->numel()) * 4);
  while (n > 0) memory::end_workspace(ids[--n]);
}

void attention_forward_meta(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape&, const Tensor&,
                            const Tensor&) {
  cpu_half_attention_scratch({&q, &k, &v});
}

void attention_backward_meta(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& grad_out, const Tensor&, const AttentionShape&, const Tensor&,
                             const Tensor&, const Tensor&) {
  cpu_half_attention_scratch({&q, &k, &v, &out, &grad_out});
  // CUDA's backward takes rowsum(dO * O) per query (cuda/attention.cpp), fp32 (fp64 for fp64).
  if (cuda_target() && out.numel() > 0)
    memory::end_workspace(memory::begin_workspace(static_cast<size_t>(out.numel() / out.size(-1)) *
                                                  (q.dtype() == kFloat64 ? 8 : 4)));
}

// cuDNN's workspace for a convolution on a CUDA target: what the CUDA backend would take for this
// shape (its algorithm choice, cuda/conv.cpp), asked only where a GPU can answer; without one
// it is not modelled (docs/MEMORY.md).
void cuda_conv_workspace(ConvDirection d, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  if (!cuda_target() || !mixtrain::cuda::is_available() || !conv2d_workspace_bytes.has(DeviceType::CUDA)) return;
  size_t bytes = 0;
  conv2d_workspace_bytes(DeviceType::CUDA, d, x, w, y, p, memory::dry_run_target().index, &bytes);
  if (bytes > 0) memory::end_workspace(memory::begin_workspace(bytes));
}

void conv2d_meta(const Tensor& x, const Tensor& w, const Tensor&, const Conv2dParams& p, const Tensor& out) {
  cuda_conv_workspace(ConvDirection::Forward, x, w, out, p);
}

void conv2d_backward_input_meta(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x) {
  cuda_conv_workspace(ConvDirection::BackwardInput, grad_x, w, grad_out, p);
}

void conv2d_backward_weight_meta(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p, const Tensor& grad_w) {
  cuda_conv_workspace(ConvDirection::BackwardWeight, x, grad_w, grad_out, p);
}

// scaled_mm's scratch. The CPU (cpu/fp8.cpp) holds an fp32 product unless the output is fp32,
// decodes both operands to bf16 (fp32 without the vdpbf16ps kernel) for the GEMM and widens the
// bias. CUDA (cuda/fp8.cpp) takes cuBLASLt's workspace and copies into the TN layout an operand
// that is not in it: a must be row-major, b column-major.
void scaled_mm_meta(const Tensor& a, const Tensor& b, const Tensor&, const Tensor&, const Tensor& bias,
                    const Tensor& out) {
  if (!memory::recording()) return;
  auto bytes = [](int64_t n, size_t size) { return static_cast<size_t>(n) * size; };
  if (memory::dry_run_target().is_cuda()) {
    memory::hold_workspace("cublaslt", kCudaGemmWorkspaceBytes);
    const bool a_ok = a.stride(1) == 1 || a.size(1) == 1, b_ok = b.stride(0) == 1 || b.size(0) == 1;
    const int64_t ia = a_ok ? -1 : memory::begin_workspace(bytes(a.numel(), 1));
    const int64_t ib = b_ok ? -1 : memory::begin_workspace(bytes(b.numel(), 1));
    memory::end_workspace(ib);
    memory::end_workspace(ia);
    return;
  }
  const int64_t acc = out.dtype() == kFloat32 ? -1 : memory::begin_workspace(bytes(out.numel(), 4));
  if (a.size(1) > 0) {
    const size_t width = backends::cpu::bf16_gemm_enabled() ? 2 : 4;
    const int64_t ia = memory::begin_workspace(bytes(a.numel(), width));
    const int64_t ib = memory::begin_workspace(bytes(b.numel(), width));
    memory::end_workspace(ib);
    memory::end_workspace(ia);
  }
  if (bias.defined()) memory::end_workspace(memory::begin_workspace(bytes(bias.numel(), 4)));
  memory::end_workspace(acc);
}

// The CUDA loss takes an int flag (the target range check) and its workspace for the call.
void nll_loss_meta(const Tensor&, const Tensor&, int64_t, int64_t, int64_t, const NllLossArgs&, const Tensor&,
                   const Tensor&) {
  if (!cuda_target()) return;
  const int64_t flag = memory::begin_workspace(sizeof(int));
  memory::end_workspace(memory::begin_workspace(kCudaNllWorkspaceBytes));
  memory::end_workspace(flag);
}

}  // namespace

void register_kernels() {
#define MT_REGISTER_NOOP(family) register_noop_family(#family, DeviceType::Meta);
  MT_KERNEL_FAMILIES(MT_REGISTER_NOOP)
#undef MT_REGISTER_NOOP
  gemm.set(DeviceType::Meta, &gemm_meta);
  nll_loss.set(DeviceType::Meta, &nll_loss_meta);
  scaled_mm.set(DeviceType::Meta, &scaled_mm_meta);
  attention_forward.set(DeviceType::Meta, &attention_forward_meta);
  attention_backward.set(DeviceType::Meta, &attention_backward_meta);
  conv2d.set(DeviceType::Meta, &conv2d_meta);
  conv2d_backward_input.set(DeviceType::Meta, &conv2d_backward_input_meta);
  conv2d_backward_weight.set(DeviceType::Meta, &conv2d_backward_weight_meta);
}

}  // namespace mixtrain::backends::meta
