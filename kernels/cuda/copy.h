#pragma once
// The copy family's launchers (copy.cu), called by backends/cuda/copy.cpp;
// what every launcher takes and does: launch_args.h.
#include "kernels/cuda/launch_args.h"

namespace mixtrain::kernels {

void copy(const ElemIter<2>& it, DType dst, DType src, cudaStream_t stream);
void fill(const ElemIter<1>& it, DType dtype, double value, cudaStream_t stream);

}  // namespace mixtrain::kernels
