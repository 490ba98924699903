#include "mixtrain/base/device.h"

#include <atomic>
#include <cstdlib>

#include "mixtrain/base/error.h"
#include "mixtrain/config.h"

namespace mixtrain {

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return "cuda";
    case DeviceType::Meta: return "meta";
  }
  return "unknown";
}

std::string Device::str() const {
  if (type != DeviceType::CUDA) return device_type_name(type);
  return "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "meta") return meta();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string digits = text.substr(5);
    char* end = nullptr;
    const long idx = std::strtol(digits.c_str(), &end, 10);
    if (!digits.empty() && end && *end == '\0' && idx >= 0 && idx < 1024) return cuda(static_cast<int>(idx));
  }
  MT_ERROR("unknown device '", text, "' (expected cpu, cuda, cuda:N or meta)");
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }
std::ostream& operator<<(std::ostream& os, DeviceType t) { return os << device_type_name(t); }

namespace cuda {

namespace {
std::atomic<bool> g_allow_tf32{false};
std::atomic<bool> g_cudnn_allow_tf32{true};
std::atomic<bool> g_cudnn_benchmark{false};
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }
void set_cudnn_allow_tf32(bool allow) { g_cudnn_allow_tf32.store(allow); }
bool cudnn_allow_tf32() { return g_cudnn_allow_tf32.load(); }
void set_cudnn_benchmark(bool enabled) { g_cudnn_benchmark.store(enabled); }
bool cudnn_benchmark() { return g_cudnn_benchmark.load(); }

#ifndef MIXTRAIN_WITH_CUDA
bool is_available() { return false; }
int device_count() { return 0; }
void synchronize(int) {}
std::string device_name(int) { return ""; }
void* stream(int) { return nullptr; }
#endif

}  // namespace cuda

}  // namespace mixtrain
