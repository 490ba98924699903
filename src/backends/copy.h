#pragma once
// The copy family's kernels: conversions between dtypes and layouts, and fills. Used by
// Tensor::to / contiguous / copy_ (ops/copy.cpp) and the factories.
#include "backends/kernel.h"
#include "backends/kernel_types.h"

namespace mixtrain::backends {

// dst = src elementwise, converting dtype; same shape, any strides on both. One side may be on
// the host: the kernel of the device side runs it.
MT_KERNEL(copy, copy, void(const Tensor& src, const Tensor& dst));
MT_KERNEL(copy, fill, void(const Tensor& dst, double value));

}  // namespace mixtrain::backends
