// Temporary registry: a plain system allocator with statistics (replaced by the caching allocator).
#include "mixtrain/memory/allocator.h"

#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "mixtrain/core/error.h"

namespace mixtrain::memory {

namespace {
class SystemAllocator : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    const size_t rounded = ((nbytes ? nbytes : 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    MT_CHECK(p, "out of memory allocating ", nbytes, " bytes on cpu");
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[p] = rounded;
    s_.allocated_bytes += rounded;
    s_.reserved_bytes += rounded;
    s_.peak_allocated_bytes = std::max(s_.peak_allocated_bytes, s_.allocated_bytes);
    s_.peak_reserved_bytes = std::max(s_.peak_reserved_bytes, s_.reserved_bytes);
    ++s_.num_backing_allocs;
    return p;
  }
  void deallocate(void* p) override {
    if (!p) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sizes_.find(p);
      s_.allocated_bytes -= it->second;
      s_.reserved_bytes -= it->second;
      ++s_.num_backing_frees;
      sizes_.erase(it);
    }
    std::free(p);
  }
  Device device() const override { return Device::cpu(); }
  Stats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return s_;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    s_.peak_allocated_bytes = s_.allocated_bytes;
    s_.peak_reserved_bytes = s_.reserved_bytes;
  }
  void empty_cache() override {}
  std::string name() const override { return "system"; }

 private:
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> sizes_;
  Stats s_;
};

Allocator* g_override[2] = {nullptr, nullptr};
}  // namespace

Allocator& allocator_for(Device device) {
  static SystemAllocator cpu;
  if (g_override[static_cast<int>(device.type)]) return *g_override[static_cast<int>(device.type)];
  MT_CHECK(device.is_cpu(), "no allocator for device ", device);
  return cpu;
}

void set_allocator(Device device, Allocator* allocator) { g_override[static_cast<int>(device.type)] = allocator; }
Stats stats(Device device) { return allocator_for(device).stats(); }
void reset_peak_stats(Device device) { allocator_for(device).reset_peak_stats(); }
void empty_cache(Device device) { allocator_for(device).empty_cache(); }

void to_json(nlohmann::json& j, const Stats& s) {
  j = {{"allocated_bytes", s.allocated_bytes}, {"reserved_bytes", s.reserved_bytes},
       {"peak_allocated_bytes", s.peak_allocated_bytes}, {"peak_reserved_bytes", s.peak_reserved_bytes}};
}

}  // namespace mixtrain::memory
