// The kernel registry: registers every compiled-in backend's kernels once, and the error for a
// kernel a device does not have.
#include <cstring>
#include <mutex>
#include <sstream>
#include <vector>

#include "backends/amp.h"
#include "backends/families.h"
#include "backends/kernel.h"
#include "backends/meta/meta_backend.h"
#include "mixtrain/base/error.h"
#include "mixtrain/config.h"

namespace mixtrain::backends {

// Each backend's register_<family>() (backends/<backend>/<family>.cpp), walked by register_kernels().
namespace cpu {
MT_BACKEND_REGISTRATION()
}  // namespace cpu
#ifdef MIXTRAIN_WITH_CUDA
namespace cuda {
MT_BACKEND_REGISTRATION()
}  // namespace cuda
#endif

const char* unary_op_name(UnaryOp op) {
#define MT_NAME(code, name, ...) #name,
  static constexpr const char* names[] = {MT_UNARY_OPS(MT_NAME)};
  static_assert(sizeof(names) / sizeof(names[0]) == kNumUnaryOps);
  return names[static_cast<int>(op)];
}

const char* binary_op_name(BinaryOp op) {
  static constexpr const char* names[] = {MT_BINARY_OPS(MT_NAME)};
#undef MT_NAME
  static_assert(sizeof(names) / sizeof(names[0]) == kNumBinaryOps);
  return names[static_cast<int>(op)];
}

namespace {
bool register_all() {
  register_amp_fallback();
  cpu::register_kernels();
  meta::register_kernels();
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

namespace {
struct NoopFamilies {
  std::mutex mutex;
  std::vector<std::pair<const char*, DeviceType>> entries;
};
NoopFamilies& noop_families() {
  static NoopFamilies* f = new NoopFamilies();
  return *f;
}
}  // namespace

void register_noop_family(const char* family, DeviceType device) {
  NoopFamilies& f = noop_families();
  std::lock_guard<std::mutex> lock(f.mutex);
  f.entries.emplace_back(family, device);
}

bool is_noop_family(const char* family, DeviceType device) {
  NoopFamilies& f = noop_families();
  std::lock_guard<std::mutex> lock(f.mutex);
  for (const auto& [name, type] : f.entries)
    if (type == device && std::strcmp(name, family) == 0) return true;
  return false;
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
