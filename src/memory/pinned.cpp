// The process-wide pinned host allocator: the CachingAllocator over the page-locked backing the
// CUDA backend registers, so pinned blocks are cached like device blocks (cudaHostAlloc and
// cudaFreeHost are slow and synchronize the device; PyTorch caches them for the same reason).
#include <atomic>
#include <mutex>

#include "memory/backing.h"
#include "mixtrain/base/error.h"
#include "mixtrain/memory/allocator.h"
#include "mixtrain/memory/caching_allocator.h"

namespace mixtrain::memory {

namespace {

struct PinnedRegistry {
  std::mutex mutex;
  BackingFactory factory;
  CachingAllocator* fallback = nullptr;  // the default, created on first use, never destroyed
  std::atomic<Allocator*> current{nullptr};
};

// Never destroyed, as the device registry: pinned tensors in static objects may die after main.
PinnedRegistry& registry() {
  static PinnedRegistry* r = new PinnedRegistry();
  return *r;
}

// Why no default can be made, or empty; the mutex is held.
std::string reason_locked(PinnedRegistry& r, std::unique_ptr<BackingAllocator>* made) {
  if (!r.factory)
    return "pinned host memory needs the CUDA backend, and this mixtrain was built without it "
           "(configure with -DMIXTRAIN_CUDA=ON)";
  std::unique_ptr<BackingAllocator> backing = r.factory(0);
  if (!backing) return "pinned host memory needs a CUDA device, and none was found (cuda::device_count() == 0)";
  if (made) *made = std::move(backing);
  return "";
}

}  // namespace

void register_pinned_backing_factory(BackingFactory factory) {
  PinnedRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.factory = std::move(factory);
}

Allocator& pinned_allocator() {
  PinnedRegistry& r = registry();
  if (Allocator* a = r.current.load(std::memory_order_acquire)) return *a;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (Allocator* a = r.current.load(std::memory_order_relaxed)) return *a;
  if (!r.fallback) {
    std::unique_ptr<BackingAllocator> backing;
    const std::string why = reason_locked(r, &backing);
    MT_CHECK(why.empty(), "pinned_allocator: ", why);
    // Default options, not the environment's: MIXTRAIN_MEMORY_* size device memory, and
    // PreAllocate would page-lock a fraction of all host memory.
    r.fallback = new CachingAllocator(std::move(backing), Device::cpu(), CachingAllocatorOptions());
  }
  r.current.store(r.fallback, std::memory_order_release);
  return *r.fallback;
}

std::string pinned_memory_unavailable_reason() {
  PinnedRegistry& r = registry();
  if (r.current.load(std::memory_order_acquire)) return "";
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.fallback) return "";
  return reason_locked(r, nullptr);
}

void set_pinned_allocator(Allocator* allocator) {
  MT_CHECK(!allocator || allocator->device().is_cpu(), "set_pinned_allocator: pinned memory is host memory, but the ",
           "allocator serves ", allocator->device());
  PinnedRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.current.store(allocator ? allocator : r.fallback, std::memory_order_release);
}

Stats pinned_stats() { return pinned_allocator().stats(); }
void reset_pinned_peak_stats() { pinned_allocator().reset_peak_stats(); }
void empty_pinned_cache() { pinned_allocator().empty_cache(); }

}  // namespace mixtrain::memory
