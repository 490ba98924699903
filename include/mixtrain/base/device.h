#pragma once
// Where a tensor lives: the CPU, a numbered CUDA device, or meta (shape, strides and dtype but no
// data: the dry run's device, docs/MEMORY.md).
#include <cstdint>
#include <ostream>
#include <string>

namespace mixtrain {

enum class DeviceType : uint8_t { CPU, CUDA, Meta };
constexpr int kNumDeviceTypes = 3;
// libtorch's spellings: x.to(kCUDA).
constexpr DeviceType kCPU = DeviceType::CPU;
constexpr DeviceType kCUDA = DeviceType::CUDA;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  // Implicit, so a device type stands for its device 0 as in libtorch: x.to(kCUDA).
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT
  // From "cpu", "cuda", "cuda:1" or "meta", as libtorch's Device("cuda:0") (Device::parse).
  Device(const std::string& text) : Device(parse(text)) {}  // NOLINT: implicit, as in libtorch

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  static Device meta() { return {DeviceType::Meta, 0}; }
  static Device parse(const std::string& text);  // "cpu", "cuda", "cuda:1", "meta"

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool is_meta() const { return type == DeviceType::Meta; }
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
// Waits for the work queued on a device (-1: every device). CUDA ops are asynchronous; reading a
// value on the host (item(), to_vector(), to(cpu)) synchronises by itself.
void synchronize(int device = -1);
std::string device_name(int device = 0);  // "" without CUDA
// The cudaStream_t (as void*) all of a device's work is queued on, for interop with other CUDA
// code (events, custom kernels); nullptr without CUDA.
void* stream(int device = 0);

// Math modes, as PyTorch's torch.backends flags: fp32 matrix products on TF32 tensor cores (off
// by default: fp32 means fp32), fp32 convolutions on TF32 (on by default, as in PyTorch), and
// cuDNN benchmark mode (time the algorithms once per shape and cache the fastest; off by default).
void set_allow_tf32(bool allow);
bool allow_tf32();
void set_cudnn_allow_tf32(bool allow);
bool cudnn_allow_tf32();
void set_cudnn_benchmark(bool enabled);
bool cudnn_benchmark();
}  // namespace cuda

}  // namespace mixtrain
