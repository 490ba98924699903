// The meta backend's registration: every family's kernels do nothing on meta tensors (the ops
// have allocated the outputs; there are no values). The kernels that take workspace beyond their
// operands (GEMMs, scaled_mm, fused attention, convolution, the NLL loss) instead have a running
// dry run record what the target's backend would take for them: each backend answers for its
// own kernels (backends/workspace.h). Other kernels' internal scratch is not modelled
// (docs/MEMORY.md).
#include "backends/families.h"
#include "backends/kernel.h"
#include "backends/meta/meta_backend.h"
#include "backends/workspace.h"
#include "mixtrain/memory/dry_run.h"

namespace mixtrain::backends::meta {

namespace {

// The answers of the dry run's target backend, or null when no dry run records.
const KernelWorkspace* target_answers() {
  if (!memory::recording()) return nullptr;
  return memory::dry_run_target().is_cuda() ? &cuda::kernel_workspace() : &cpu::kernel_workspace();
}

// The meta function of the kernel whose answer is KernelWorkspace::*Answer: the target
// backend's answer, where it has one.
template <class Fn>
struct AskTarget;
template <class... Args>
struct AskTarget<void (*)(Args...)> {
  template <void (*KernelWorkspace::*Answer)(Args...)>
  static void call(Args... args) {
    const KernelWorkspace* answers = target_answers();
    if (answers && answers->*Answer) (answers->*Answer)(args...);
  }
};

}  // namespace

void register_kernels() {
#define MT_REGISTER_NOOP(family) register_noop_family(#family, DeviceType::Meta);
  MT_KERNEL_FAMILIES(MT_REGISTER_NOOP)
#undef MT_REGISTER_NOOP
#define MT_ASK_TARGET(kernel) \
  kernel.set(DeviceType::Meta, &AskTarget<decltype(KernelWorkspace::kernel)>::call<&KernelWorkspace::kernel>);
  MT_ASK_TARGET(gemm)
  MT_ASK_TARGET(scaled_mm)
  MT_ASK_TARGET(attention_forward)
  MT_ASK_TARGET(attention_backward)
  MT_ASK_TARGET(nll_loss)
  MT_ASK_TARGET(conv2d)
  MT_ASK_TARGET(conv2d_backward_input)
  MT_ASK_TARGET(conv2d_backward_weight)
#undef MT_ASK_TARGET
}

}  // namespace mixtrain::backends::meta
