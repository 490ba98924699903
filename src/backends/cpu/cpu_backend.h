#pragma once
// The CPU backend's shared declarations. Its kernels: Eigen for matrix products, plain loops
// (vectorized by the compiler, split by OpenMP) for the rest, one file per op family. fp16/bf16 are stored as such and computed in fp32, rounding once, which
// is what the GPU does, so AMP numerics can be tested here.
#include "backends/copy.h"

namespace mixtrain::backends::cpu {

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
  backends::copy(DeviceType::CPU, tmp, out);
}

}  // namespace mixtrain::backends::cpu
