#pragma once
// The CUDA backend's workspace sizes, used by its kernels and by its answers to a dry run
// (workspace.cpp, backends/workspace.h). Plain C++, so those answers build without CUDA.
#include <cstddef>
#include <cstdint>

#include "mixtrain/base/dtype.h"

namespace mixtrain::backends::cuda {

// cuBLASLt's workspace, held by each device's context for the process's life (context.cpp):
// what cuBLAS recommends for Hopper.
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

// nll_loss's partial sums (kernels/loss.cu), taken for the call.
constexpr size_t kNllWorkspaceBytes = 32;

// attention_backward's rowsum(dO * O), one per query of `batch` x `l` (kernels/attention.cu), in
// fp32 (fp64 for fp64), taken for the call.
inline size_t attention_workspace_bytes(DType dtype, int64_t batch, int64_t l) {
  return static_cast<size_t>(batch * l) * (dtype == DType::Float64 ? sizeof(double) : sizeof(float));
}

}  // namespace mixtrain::backends::cuda
