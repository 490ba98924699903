#pragma once
// Internal: how a static plan (memory/step_plan.h) hooks into the CachingAllocator. A plan that
// records or replays a step installs a StepSession on the calling thread; the allocator asks it
// first, before taking its mutex, so requests a replay serves from its arena cost no lock and no
// search. Other threads never see the session: their requests go to the caching allocator.
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mixtrain::memory {

class CachingAllocator;

namespace detail {

// One allocation of a CachingAllocator that a plan carves into its in-step buffers. The first
// kMinBlockSize bytes are left unused, so no buffer shares the block's own address.
struct Arena {
  char* base = nullptr;  // buffer offsets count from here
  size_t bytes = 0;
  std::atomic<int64_t> live{0};  // buffers handed out and not yet freed
  bool retired = false;          // under the allocator's mutex: freed when live reaches 0
};

class StepSession {
 public:
  explicit StepSession(CachingAllocator& allocator) : allocator_(&allocator) {}
  virtual ~StepSession() = default;
  CachingAllocator* allocator() const { return allocator_; }

  // Replay: arena memory for the request, or nullptr to let the caching allocator serve it.
  virtual void* allocate(size_t nbytes) = 0;
  // Replay: true when ptr was this session's arena memory (now free).
  virtual bool deallocate(void* ptr) = 0;
  // Recording: what the caching allocator served and freed (freed: under its mutex).
  virtual void served(void* ptr, size_t nbytes, size_t rounded) = 0;
  virtual void freed(void* ptr, size_t rounded) = 0;

 private:
  CachingAllocator* allocator_;
};

// The calling thread's session (nullptr: none); install returns the one it replaced.
StepSession* current_step_session();
StepSession* install_step_session(StepSession* session);

}  // namespace detail
}  // namespace mixtrain::memory
