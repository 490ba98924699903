#pragma once
// The workspace a backend's kernels take beyond the tensors the ops layer allocates, as a dry run
// (memory/dry_run.h) records it. The meta backend runs no kernel: for each kernel that takes
// workspace it asks the dry run's target backend (meta/register.cpp), which records what its own
// kernel would take for operands like these (meta tensors: shapes, strides and dtypes decide it).
// Each backend answers for its own kernels: cpu/workspace.cpp and cuda/workspace.cpp. The CUDA
// answers are arithmetic on the sizes the CUDA backend fixes (cuda/workspace.h), so that file is
// built without CUDA too, and a CPU-only build plans a CUDA step with the same numbers.
#include "backends/attention.h"
#include "backends/conv.h"
#include "backends/fp8.h"
#include "backends/loss.h"
#include "backends/matmul.h"

namespace mixtrain::backends {

// One backend's answers, each with its kernel's signature; null where the kernel takes none.
// Backends list them in this order (a misplaced one mostly fails to compile: the signatures
// differ, except the two conv backward kernels').
struct KernelWorkspace {
  decltype(backends::gemm)::Fn gemm = nullptr;
  decltype(backends::scaled_mm)::Fn scaled_mm = nullptr;
  decltype(backends::attention_forward)::Fn attention_forward = nullptr;
  decltype(backends::attention_backward)::Fn attention_backward = nullptr;
  decltype(backends::nll_loss)::Fn nll_loss = nullptr;
  decltype(backends::conv2d)::Fn conv2d = nullptr;
  decltype(backends::conv2d_backward_input)::Fn conv2d_backward_input = nullptr;
  decltype(backends::conv2d_backward_weight)::Fn conv2d_backward_weight = nullptr;
};

namespace cpu {
const KernelWorkspace& kernel_workspace();
}  // namespace cpu

namespace cuda {
const KernelWorkspace& kernel_workspace();
}  // namespace cuda

}  // namespace mixtrain::backends
