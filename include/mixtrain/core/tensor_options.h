#pragma once
#include "mixtrain/core/device.h"
#include "mixtrain/core/dtype.h"

namespace mixtrain {

// What a factory makes: dtype, device and whether autograd tracks it. Chainable setters.
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}  // NOLINT: lets users pass a dtype where options are expected
  TensorOptions(Device d) : device_(d) {}  // NOLINT

  TensorOptions& dtype(DType d) { dtype_ = d; return *this; }
  TensorOptions& device(Device d) { device_ = d; return *this; }
  TensorOptions& requires_grad(bool r) { requires_grad_ = r; return *this; }

  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool requires_grad() const { return requires_grad_; }

 private:
  DType dtype_ = DType::Float32;
  Device device_ = Device::cpu();
  bool requires_grad_ = false;
};

}  // namespace mixtrain
