#pragma once
// What a memory planner needs to know of one buffer of a step: its size and when it lives. The
// dry run's trace (memory::dry_run, docs/MEMORY.md "Dry run") produces these from its events; the
// real-step recorder of memory::plan_step (step_plan.h) produces them from a recorded step.
#include <cstddef>
#include <cstdint>

namespace mixtrain::memory {

// A buffer born and dying inside one step. Times are event indices of the step: the buffer is
// live over [alloc_at, free_at), so one freed at event t and another allocated at t may share bytes.
struct BufferLifetime {
  size_t bytes = 0;
  int64_t alloc_at = 0;
  int64_t free_at = 0;
};

}  // namespace mixtrain::memory
