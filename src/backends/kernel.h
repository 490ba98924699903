#pragma once
// A kernel declared once and registered per backend, PyTorch's DispatchStub in spirit. Each op
// family's header (backends/<family>.h) declares its kernels with MT_KERNEL, signature and
// contract in one place; each backend defines plain functions in backends/<backend>/<family>.cpp
// and registers them from its explicit registration function (not from static initialisers,
// which a static library may drop). The ops layer calls a kernel with where to run it first:
//
//   backends::conv2d(x, x, w, bias, params, out);   // on x's device
//
// A device with no kernel registered gets a mixtrain::Error naming the kernel, its family and
// the device. A new backend registers its functions without touching the others.
#include <atomic>
#include <utility>

#include "mixtrain/base/device.h"
#include "mixtrain/base/error.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain::backends {

// Where a kernel runs: given as a tensor (its device), a Device or a DeviceType.
struct On {
  DeviceType type;
  On(DeviceType t) : type(t) {}                  // NOLINT(google-explicit-constructor)
  On(const Device& d) : type(d.type) {}          // NOLINT(google-explicit-constructor)
  On(const Tensor& t) : type(t.device().type) {}  // NOLINT(google-explicit-constructor)
};

// Registers every backend's kernels, once; every kernel call makes sure it has happened.
void ensure_kernels_registered();

[[noreturn]] void throw_missing_kernel(const char* family, const char* kernel, DeviceType device,
                                       const bool* registered);

// Makes every kernel of a family do nothing on a device type that has no function of its own
// for it (the meta backend: outputs are allocated by the ops, there is nothing to compute).
void register_noop_family(const char* family, DeviceType device);
bool is_noop_family(const char* family, DeviceType device);

template <class Signature>
class Kernel;

template <class... Args>
class Kernel<void(Args...)> {
 public:
  using Fn = void (*)(Args...);

  constexpr Kernel(const char* family, const char* name) : family_(family), name_(name) {}
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  void operator()(On on, Args... args) const { get(on.type)(std::forward<Args>(args)...); }

  // The function for a device: its own, else the fallback, else an error.
  Fn get(DeviceType device) const {
    ensure_kernels_registered();
    if (Fn fn = fns_[index(device)].load(std::memory_order_acquire)) return fn;
    if (is_noop_family(family_, device)) {
      Fn noop = [](Args...) {};
      fns_[index(device)].store(noop, std::memory_order_release);
      return noop;
    }
    if (Fn fn = fallback_.load(std::memory_order_acquire)) return fn;
    bool registered[kNumDeviceTypes];
    for (int i = 0; i < kNumDeviceTypes; ++i) registered[i] = fns_[i].load(std::memory_order_relaxed) != nullptr;
    throw_missing_kernel(family_, name_, device, registered);
  }

  void set(DeviceType device, Fn fn) { fns_[index(device)].store(fn, std::memory_order_release); }
  // Used for any device without its own function (e.g. the AMP kernels' copy-to-host default).
  void set_fallback(Fn fn) { fallback_.store(fn, std::memory_order_release); }
  bool has(DeviceType device) const {
    ensure_kernels_registered();
    return fns_[index(device)].load(std::memory_order_acquire) != nullptr;
  }

  const char* name() const { return name_; }
  const char* family() const { return family_; }

 private:
  static int index(DeviceType d) { return static_cast<int>(d); }

  const char* family_;
  const char* name_;
  mutable std::atomic<Fn> fns_[kNumDeviceTypes] = {};  // get() caches a no-op family's function
  std::atomic<Fn> fallback_{nullptr};
};

}  // namespace mixtrain::backends

// Declares (and defines: an inline variable, constant-initialised) the kernel `name` of op
// family `family` with the given function type, e.g.
//   MT_KERNEL(conv, conv2d, void(const Tensor& x, const Tensor& w, ...));
// It also declares kernel_family_<family>(), never defined: a mark that the family's header is
// included (all_kernels.h checks it for every family of families.h).
#define MT_KERNEL(family, name, ...)  \
  void kernel_family_##family();      \
  inline ::mixtrain::backends::Kernel<__VA_ARGS__> name{#family, #name}
