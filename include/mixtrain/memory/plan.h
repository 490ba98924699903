#pragma once
// Static memory plans: every in-step buffer of a step gets a fixed offset in one arena, so a step
// replayed from the plan needs no allocator search (docs/MEMORY.md, "Static plans").
#include <cstddef>
#include <vector>

#include "mixtrain/memory/trace.h"

namespace mixtrain::memory {

struct ArenaPlan {
  static constexpr size_t kAlignment = 512;  // CachingAllocator::kMinBlockSize

  std::vector<size_t> offsets;   // one per buffer, in the order given; multiples of kAlignment
  size_t arena_bytes = 0;        // the arena the offsets fit in
  size_t lower_bound_bytes = 0;  // peak of live (aligned) bytes over time: no plan does better
  size_t first_fit_bytes = 0;    // Caffe's size-oblivious first-fit slots, for comparison
};

// A buffer's size as planned: bytes rounded up to kAlignment (zero stays zero: it takes no room).
size_t aligned_plan_bytes(size_t bytes);

// The peak over time of the aligned bytes live at once.
size_t lower_bound_bytes(const std::vector<BufferLifetime>& buffers);

// Caffe-style slots: buffers in allocation order take the first slot whose current user is dead
// by then, whatever the sizes; a slot is as large as its largest user. Returns the sum of slots.
size_t first_fit_slot_bytes(const std::vector<BufferLifetime>& buffers);

// Greedy by size with best-fit gaps (Pisarchyk & Lee 2020, TFLite's arena planner): buffers from
// the largest down each take the smallest gap, between the placed buffers that overlap it in time,
// that fits; failing one, the offset after the highest of them. Throws mixtrain::Error for a
// buffer with free_at < alloc_at. Buffers that take no room (zero bytes, or free_at == alloc_at)
// get offset 0.
ArenaPlan plan_arena(const std::vector<BufferLifetime>& buffers);

}  // namespace mixtrain::memory
