// The kernel registry: registers every compiled-in backend's kernels once, and the error for a
// kernel a device does not have.
#include <sstream>

#include "backends/amp.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/kernel.h"
#include "mixtrain/config.h"
#include "mixtrain/core/error.h"
#ifdef MIXTRAIN_WITH_CUDA
#include "backends/cuda/operands.h"
#endif

namespace mixtrain::backends {

const char* unary_op_name(UnaryOp op) {
  static const char* names[] = {"neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "abs", "pow", "square"};
  return names[static_cast<int>(op)];
}

const char* binary_op_name(BinaryOp op) {
  static const char* names[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"};
  return names[static_cast<int>(op)];
}

namespace {
bool register_all() {
  register_amp_fallback();
  cpu::register_kernels();
#ifdef MIXTRAIN_WITH_CUDA
  cuda::register_kernels();  // CUDA tensors exist only where a device does, so this is safe without one
#endif
  return true;
}
}  // namespace

void ensure_kernels_registered() {
  static const bool registered = register_all();
  (void)registered;
}

void throw_missing_kernel(const char* family, const char* kernel, DeviceType device, const bool* registered) {
  std::ostringstream have;
  for (int i = 0; i < kNumDeviceTypes; ++i)
    if (registered[i]) have << (have.tellp() > 0 ? ", " : "") << static_cast<DeviceType>(i);
  const std::string list = have.str();
  MT_ERROR(kernel, ": no kernel for ", device, " tensors (op family '", family, "'; registered for: ",
           list.empty() ? "no device" : list, ")");
}

}  // namespace mixtrain::backends
