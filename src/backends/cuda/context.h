#pragma once
// Per-device state of the CUDA backend: the one stream all of a device's work goes to (so the
// caching allocator may reuse a freed block at once: later work is ordered after earlier work),
// the cuBLASLt and cuDNN handles bound to it, and the persistent GEMM workspace.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>

#include "mixtrain/core/tensor.h"

namespace mixtrain::backends::cuda {

struct DeviceContext {
  int index = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* gemm_workspace = nullptr;
  size_t gemm_workspace_bytes = 0;
  cudaDeviceProp props{};
  cudnnHandle_t cudnn();  // created on first use (it costs time and memory)

 private:
  cudnnHandle_t cudnn_ = nullptr;
};

// The context of device `index`, created on first use; makes that device current.
DeviceContext& context(int index);
// The context of a CUDA tensor's device.
DeviceContext& context(const Tensor& t);

// A device scratch buffer of at least `bytes` from the caching allocator (an int64 tensor keeps
// it alive; free it when done: later work on the stream is ordered after the kernels using it).
Tensor scratch(size_t bytes, Device device);

// Copies `bytes` from device memory to the host and waits for it (a host synchronisation).
void read_back(const void* device_ptr, void* host_ptr, size_t bytes, DeviceContext& ctx);

}  // namespace mixtrain::backends::cuda
