#pragma once
#include "mixtrain/base/device.h"
#include "mixtrain/base/dtype.h"

namespace mixtrain {

// What a factory makes: dtype, device, whether autograd tracks it and whether CPU memory is pinned
// (page-locked, for asynchronous copies to CUDA; needs the CUDA backend and a device). Chainable
// setters. As in libtorch, pinned_memory is a factory option only: Tensor::options() leaves it off,
// so tensors made "like" a pinned one are ordinary.
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d), has_dtype_(true) {}  // NOLINT: lets users pass a dtype where options are expected
  TensorOptions(Device d) : device_(d) {}  // NOLINT

  TensorOptions& dtype(DType d) { dtype_ = d; has_dtype_ = true; return *this; }
  TensorOptions& device(Device d) { device_ = d; return *this; }
  TensorOptions& requires_grad(bool r) { requires_grad_ = r; return *this; }
  TensorOptions& pinned_memory(bool p) { pinned_memory_ = p; return *this; }

  DType dtype() const { return dtype_; }  // float32 unless set
  // Whether a dtype was given: factories that infer one from their values (tensor, arange) use
  // it only then, as libtorch's TensorOptions::has_dtype.
  bool has_dtype() const { return has_dtype_; }
  Device device() const { return device_; }
  bool requires_grad() const { return requires_grad_; }
  bool pinned_memory() const { return pinned_memory_; }

 private:
  DType dtype_ = DType::Float32;
  Device device_ = Device::cpu();
  bool has_dtype_ = false;
  bool requires_grad_ = false;
  bool pinned_memory_ = false;
};

}  // namespace mixtrain
