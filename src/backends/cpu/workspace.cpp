// The CPU kernels' workspace, as a dry run records it (backends/workspace.h): the fp32 copies
// that the half-precision GEMM, fused attention and scaled_mm work on, taken from the allocator
// for the call. fp32/fp64 operands need none.
#include <initializer_list>

#include "kernels/cpu/gemm_bf16.h"
#include "backends/cpu/onednn/onednn.h"
#include "backends/workspace.h"
#include "mixtrain/memory/dry_run.h"

namespace mixtrain::backends::cpu {

namespace {

size_t bytes(int64_t n, size_t size) { return static_cast<size_t>(n) * size; }

// fp32 copies of `operands` (undefined ones skipped), alive together for the call.
void fp32_copies(std::initializer_list<const Tensor*> operands) {
  int64_t ids[5];
  int n = 0;
  for (const Tensor* t : operands)
    if (t->defined()) ids[n++] = memory::begin_workspace(bytes(t->numel(), 4));
  while (n > 0) memory::end_workspace(ids[--n]);
}

// A half-precision product widens its operands and accumulates into an fp32 product
// (matmul.cpp), four buffers alive for the call. bf16 products on the vdpbf16ps kernel
// (gemm_bf16.h) widen only the bias and take the fp32 product; on oneDNN (onednn/onednn.h) they
// take none.
void gemm_workspace(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& out,
                    const Tensor& bias, GemmEpilogue epilogue) {
  if (!is_half(a.dtype()) || onednn_takes_gemm(a, trans_a, b, trans_b, out, bias, epilogue)) return;
  const bool bf16_kernel = a.dtype() == kBFloat16 && b.dtype() == kBFloat16 && bf16_gemm_enabled();
  const Tensor none;
  fp32_copies({bf16_kernel ? &none : &a, bf16_kernel ? &none : &b, &bias, &out});
}

// Fused attention widens half operands into fp32 copies (attention.cpp).
void attention_forward_workspace(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape&,
                                 const Tensor&, const Tensor&) {
  if (is_half(q.dtype())) fp32_copies({&q, &k, &v});
}

void attention_backward_workspace(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& grad_out, const Tensor&, const AttentionShape&, const Tensor&,
                                  const Tensor&, const Tensor&) {
  if (is_half(q.dtype())) fp32_copies({&q, &k, &v, &out, &grad_out});
}

// scaled_mm (fp8.cpp) holds an fp32 product unless the output is fp32, decodes both operands to
// bf16 (fp32 without the vdpbf16ps kernel) for the GEMM and widens the bias.
void scaled_mm_workspace(const Tensor& a, const Tensor& b, const Tensor&, const Tensor&, const Tensor& bias,
                         const Tensor& out) {
  const int64_t acc = out.dtype() == kFloat32 ? -1 : memory::begin_workspace(bytes(out.numel(), 4));
  if (a.size(1) > 0) {
    const size_t width = bf16_gemm_enabled() ? 2 : 4;
    const int64_t ia = memory::begin_workspace(bytes(a.numel(), width));
    const int64_t ib = memory::begin_workspace(bytes(b.numel(), width));
    memory::end_workspace(ib);
    memory::end_workspace(ia);
  }
  if (bias.defined()) memory::end_workspace(memory::begin_workspace(bytes(bias.numel(), 4)));
  memory::end_workspace(acc);
}

}  // namespace

const KernelWorkspace& kernel_workspace() {
  static constexpr KernelWorkspace answers{gemm_workspace, scaled_mm_workspace, attention_forward_workspace,
                                           attention_backward_workspace};
  return answers;
}

}  // namespace mixtrain::backends::cpu
