#include "mixtrain/core/device.h"

#include <cstdlib>

#include "mixtrain/core/error.h"

namespace mixtrain {

const char* device_type_name(DeviceType t) { return t == DeviceType::CPU ? "cpu" : "cuda"; }

std::string Device::str() const {
  if (type == DeviceType::CPU) return "cpu";
  return "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string digits = text.substr(5);
    char* end = nullptr;
    const long idx = std::strtol(digits.c_str(), &end, 10);
    if (!digits.empty() && end && *end == '\0' && idx >= 0 && idx < 1024) return cuda(static_cast<int>(idx));
  }
  MT_ERROR("unknown device '", text, "' (expected cpu, cuda or cuda:N)");
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }
std::ostream& operator<<(std::ostream& os, DeviceType t) { return os << device_type_name(t); }

#ifndef MIXTRAIN_WITH_CUDA
namespace cuda {
bool is_available() { return false; }
int device_count() { return 0; }
}  // namespace cuda
#endif

}  // namespace mixtrain
