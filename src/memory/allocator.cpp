// The per-device registry behind allocator_for(), and the Stats JSON form.
#include "mixtrain/memory/allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

#include <nlohmann/json.hpp>

#include "memory/backing.h"
#include "mixtrain/base/error.h"
#include "mixtrain/memory/caching_allocator.h"
#include "mixtrain/memory/device_memory.h"

namespace mixtrain::memory {

namespace {

constexpr int kMaxDevices = 64;

struct Registry {
  std::mutex mutex;
  BackingFactory factories[kNumDeviceTypes];
  CachingAllocator* defaults[kNumDeviceTypes][kMaxDevices] = {};
  // Read without the mutex on every allocation; written under it.
  std::atomic<Allocator*> current[kNumDeviceTypes][kMaxDevices];

  Registry() {
    for (auto& row : current)
      for (auto& slot : row) slot.store(nullptr, std::memory_order_relaxed);
  }
};

// Never destroyed: tensors in static objects may free their storage after main returns, and
// must still find their allocator then.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

int type_index(Device device) {
  MT_CHECK(!device.is_meta(), "memory: the meta device has no allocator (meta tensors hold no memory); ",
           "memory::dry_run reports what a step would allocate on a real device");
  MT_CHECK(device.index >= 0 && device.index < kMaxDevices, "memory: device index ", device.index,
           " of ", device, " is out of range [0, ", kMaxDevices, ")");
  MT_CHECK(!device.is_cpu() || device.index == 0, "memory: the CPU device has index 0, not ", device.index);
  return static_cast<int>(device.type);
}

CachingAllocator* make_default(Registry& r, Device device) {
  const BackingFactory& factory = r.factories[static_cast<int>(device.type)];
  std::unique_ptr<BackingAllocator> backing;
  if (factory) {
    backing = factory(device.index);
    MT_CHECK(backing, "allocator_for(", device, "): ", device_type_name(device.type), " device ", device.index,
             " not available");
  } else if (device.is_cpu()) {
    backing = std::make_unique<SystemBackingAllocator>();
  } else {
    MT_ERROR("allocator_for(", device, "): no CUDA backend compiled in (nothing registered a backing allocator for ",
             device_type_name(device.type), ")");
  }
  return new CachingAllocator(std::move(backing), device, CachingAllocatorOptions::from_env());
}

}  // namespace

void register_backing_factory(DeviceType type, BackingFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.factories[static_cast<int>(type)] = std::move(factory);
}

bool has_backing_factory(DeviceType type) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return static_cast<bool>(r.factories[static_cast<int>(type)]);
}

std::unique_ptr<BackingAllocator> make_backing(Device device) {
  Registry& r = registry();
  BackingFactory factory;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    factory = r.factories[static_cast<int>(device.type)];
  }
  if (factory) return factory(device.index);
  if (device.is_cpu()) return std::make_unique<SystemBackingAllocator>();
  return nullptr;
}

int64_t available_bytes(Device device) {
  MT_CHECK(!device.is_meta(), "memory::available_bytes: the meta device holds no memory");
  const std::unique_ptr<BackingAllocator> backing = make_backing(device);
  MT_CHECK(backing, "memory::available_bytes(", device, "): no ", device_type_name(device.type),
           " backend is compiled in");
  const Stats s = stats(device);
  const size_t free_bytes = backing->free_device_memory();
  int64_t fresh = free_bytes > static_cast<size_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(free_bytes);
  if (s.limit_bytes >= 0) fresh = std::min(fresh, std::max<int64_t>(0, s.limit_bytes - s.reserved_bytes));
  return s.reserved_bytes - s.allocated_bytes + fresh;
}

Allocator& allocator_for(Device device) {
  const int t = type_index(device);
  Registry& r = registry();
  std::atomic<Allocator*>& slot = r.current[t][device.index];
  if (Allocator* a = slot.load(std::memory_order_acquire)) return *a;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (Allocator* a = slot.load(std::memory_order_relaxed)) return *a;
  CachingAllocator*& d = r.defaults[t][device.index];
  if (!d) d = make_default(r, device);
  slot.store(d, std::memory_order_release);
  return *d;
}

void set_allocator(Device device, Allocator* allocator) {
  const int t = type_index(device);
  MT_CHECK(!allocator || allocator->device() == device, "set_allocator(", device, "): the allocator serves ",
           allocator->device());
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  // The default, possibly not created yet (then allocator_for creates it).
  if (!allocator) allocator = r.defaults[t][device.index];
  r.current[t][device.index].store(allocator, std::memory_order_release);
}

Stats stats(Device device) { return allocator_for(device).stats(); }
void reset_peak_stats(Device device) { allocator_for(device).reset_peak_stats(); }
void empty_cache(Device device) { allocator_for(device).empty_cache(); }

void to_json(nlohmann::json& j, const Stats& s) {
  j = nlohmann::json{
      {"allocated_bytes", s.allocated_bytes},
      {"reserved_bytes", s.reserved_bytes},
      {"peak_allocated_bytes", s.peak_allocated_bytes},
      {"peak_reserved_bytes", s.peak_reserved_bytes},
      {"requested_bytes", s.requested_bytes},
      {"num_allocs", s.num_allocs},
      {"num_frees", s.num_frees},
      {"num_backing_allocs", s.num_backing_allocs},
      {"num_backing_frees", s.num_backing_frees},
      {"num_cache_hits", s.num_cache_hits},
      {"num_searches", s.num_searches},
      {"num_plan_hits", s.num_plan_hits},
      {"num_plan_misses", s.num_plan_misses},
      {"num_splits", s.num_splits},
      {"num_merges", s.num_merges},
      {"num_ooms", s.num_ooms},
      {"num_alloc_retries", s.num_alloc_retries},
      {"limit_bytes", s.limit_bytes},
      {"largest_free_block", s.largest_free_block},
  };
}

}  // namespace mixtrain::memory
