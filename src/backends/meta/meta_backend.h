#pragma once
// The meta backend: tensors with shape, strides and dtype but no data (Device::meta()). The ops
// layer does everything it does on a real device (checks, output allocation, autocast casts,
// autograd records); the kernels here compute nothing. docs/MEMORY.md, "Dry run and the meta device".

namespace mixtrain::backends::meta {

// Registers a no-op for every kernel of every family on Meta, and for the kernels that take
// workspace the dry run target's answer (register.cpp, backends/workspace.h).
void register_kernels();

}  // namespace mixtrain::backends::meta
