// The CachingAllocator's side of static plans (memory/step_plan.h): the arenas plans carve, and
// the frees of arena buffers that reach the allocator itself (escaped buffers, other threads).
#include <limits>

#include "memory/step_session.h"
#include "mixtrain/base/error.h"
#include "mixtrain/memory/caching_allocator.h"

namespace mixtrain::memory {

bool CachingAllocator::free_arena_buffer(void* ptr) {
  const char* p = static_cast<const char*>(ptr);
  auto it = arenas_.upper_bound(p);
  if (it == arenas_.begin()) return false;
  --it;
  detail::Arena* arena = it->second;
  if (p >= arena->base + arena->bytes) return false;
  if (arena->live.fetch_sub(1, std::memory_order_acq_rel) == 1 && arena->retired) {
    arenas_.erase(it);
    auto block = live_.find(arena->base - kMinBlockSize);
    MT_CHECK(block != live_.end(), "CachingAllocator: the block of a retired plan arena on ", device_, " is gone");
    free_live(block);
    delete arena;
  }
  return true;
}

detail::Arena* CachingAllocator::create_arena(size_t bytes) {
  MT_CHECK(bytes <= std::numeric_limits<size_t>::max() / 2, "CachingAllocator::create_arena: ", bytes,
           " bytes is not a size");
  // Not through a session: the arena is the plan's own memory, not a request of the step.
  detail::StepSession* session = detail::install_step_session(nullptr);
  void* block = nullptr;
  try {
    block = allocate(bytes + kMinBlockSize);
  } catch (...) {
    detail::install_step_session(session);
    throw;
  }
  detail::install_step_session(session);
  auto* arena = new detail::Arena;
  arena->base = static_cast<char*>(block) + kMinBlockSize;
  arena->bytes = bytes;
  std::lock_guard<std::mutex> lock(mutex_);
  arenas_.emplace(arena->base, arena);
  return arena;
}

void CachingAllocator::retire_arena(detail::Arena* arena) {
  if (!arena) return;
  std::lock_guard<std::mutex> lock(mutex_);
  arena->retired = true;
  if (arena->live.load(std::memory_order_acquire) != 0) return;  // the last free releases it
  arenas_.erase(arena->base);
  auto block = live_.find(arena->base - kMinBlockSize);
  MT_CHECK(block != live_.end(), "CachingAllocator: the block of a plan arena on ", device_, " is gone");
  free_live(block);
  delete arena;
}

}  // namespace mixtrain::memory
