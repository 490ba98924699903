#pragma once
// What every CUDA launcher shares. A launcher is the host function of kernels/<family>.cu that
// the family's host file, backends/cuda/<family>.cpp, calls once it has turned tensors into
// plain pointers, sizes and the op codes of backends/kernel_types.h: no Tensor reaches a .cu
// file, so they stay light to compile. Each family declares its launchers once, in
// kernels/<family>.h beside its .cu files, which both halves include. Every launcher enqueues on
// `stream` and checks the launch; none synchronises.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/kernel_types.h"
#include "mixtrain/base/dtype.h"

namespace mixtrain::kernels {

constexpr int kMaxDims = 12;

// N operands (operand 0 is the output) iterated over one shape, with the dimensions that are
// contiguous for every operand merged (the CUDA backend's make_iter builds it): the argument of
// the elementwise and copy launchers.
template <int N>
struct ElemIter {
  int ndim = 0;
  int64_t numel = 0;
  bool contiguous = false;  // one merged dimension, unit element stride for every operand
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};  // in bytes
  char* data[N] = {};
};

}  // namespace mixtrain::kernels
