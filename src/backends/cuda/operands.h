#pragma once
// The CUDA backend's shared host-side plumbing: operand checks and the conversion of tensors into
// the launchers' plain arguments (kernels/launch_args.h). The backend's kernels: GEMMs through
// cuBLASLt (matmul.cpp), convolutions through cuDNN (conv.cpp), everything else through our
// kernels (kernels/<family>.cu), one host file per op family; each checks its operands' devices
// and enqueues on the device's stream; only reading a value back to the host synchronises.
#include <array>

#include "kernels/cuda/launch_args.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain::backends::cuda {

// Iteration over operands of out's shape (operand 0 is the output), dimensions merged where
// every operand allows. Checks that all operands are CUDA tensors of one device.
template <int N>
kernels::ElemIter<N> make_iter(const char* op, const std::array<const Tensor*, N>& operands);

// Checks that every defined tensor is on `device`, naming the op.
void check_device(const char* op, Device device, std::initializer_list<const Tensor*> tensors);

// Device pointer of a defined tensor, or nullptr for an undefined one.
inline void* ptr(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// t as a contiguous tensor of dtype `dt` on its device: itself when it already is one, else a
// converted copy (undefined stays undefined).
Tensor as_contiguous(const Tensor& t, DType dt);
Tensor as_layout(const Tensor& t, DType dt, MemoryFormat format);  // 4-D for ChannelsLast
// The layout of an image kernel's call: its output's (written in place, so it cannot be
// converted), or, when the output fits both layouts (1x1 planes), that of the activation operand.
MemoryFormat layout_of(const char* op, const Tensor& out, const Tensor& activation);

}  // namespace mixtrain::backends::cuda
