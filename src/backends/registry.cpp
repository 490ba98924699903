#include "backends/backend.h"

#include <atomic>

#include "backends/cpu/cpu_backend.h"
#include "mixtrain/config.h"
#ifdef MIXTRAIN_WITH_CUDA
#include "backends/cuda/cuda_backend.h"  // cuda_backend(): nullptr when no device is present
#endif
#include "mixtrain/core/error.h"

namespace mixtrain::backends {

namespace {
std::atomic<Backend*> g_backends[kNumDeviceTypes] = {};
}

const char* unary_op_name(UnaryOp op) {
  static const char* names[] = {"neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "abs", "pow", "square"};
  return names[static_cast<int>(op)];
}

const char* binary_op_name(BinaryOp op) {
  static const char* names[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"};
  return names[static_cast<int>(op)];
}

void register_backend(DeviceType type, Backend* backend) { g_backends[static_cast<int>(type)].store(backend); }


Backend& backend_for(DeviceType type) {
  if (Backend* b = g_backends[static_cast<int>(type)].load(std::memory_order_acquire)) return *b;
  if (type == DeviceType::CPU) return cpu::cpu_backend();
#ifdef MIXTRAIN_WITH_CUDA
  if (Backend* b = cuda::cuda_backend()) return *b;
  MT_ERROR("cuda: no CUDA device is available on this machine");
#else
  MT_ERROR("cuda: mixtrain was built without the CUDA backend (configure with -DMIXTRAIN_CUDA=ON)");
#endif
}

}  // namespace mixtrain::backends
