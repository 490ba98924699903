#pragma once
// Where a tensor lives: the CPU or a numbered CUDA device.
#include <ostream>
#include <string>

namespace mixtrain {

enum class DeviceType : uint8_t { CPU, CUDA };
constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  static Device parse(const std::string& text);  // "cpu", "cuda", "cuda:1"

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;

  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

const char* device_type_name(DeviceType t);
std::ostream& operator<<(std::ostream& os, const Device& d);
std::ostream& operator<<(std::ostream& os, DeviceType t);

namespace cuda {
bool is_available();   // compiled with CUDA and a device is present
int device_count();    // 0 without CUDA or without a device
}  // namespace cuda

}  // namespace mixtrain
