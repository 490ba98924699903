#pragma once
// memory::dry_run: what one step would allocate on a device, found without computing or touching
// that device. fn runs a step on meta tensors (the model moved with Module::to(Device::meta()),
// inputs made with TensorOptions().device(Device::meta())): every op checks its arguments, casts
// under autocast, allocates its outputs and records autograd exactly as on a real device, but its
// kernel does nothing. The returned trace holds the allocations and frees in order with the sizes
// the target's caching allocator would serve; see trace.h and docs/MEMORY.md.
#include <functional>

#include "mixtrain/memory/trace.h"

namespace mixtrain::memory {

// Runs fn while recording meta storages (real ones made inside fn are not in the trace).
// Meta storages alive when it starts appear first, as before_step
// Allocs. For a CUDA target the cuBLAS workspace (held for the process's life) and the CUDA
// kernels' scratch are added as Workspace events. One dry run at a time per process: a nested or
// concurrent call throws. If fn throws, the recording stops and the exception propagates.
MemoryTrace dry_run(Device target, const std::function<void()>& fn);

// The same trace from a real step on `device` (CPU or CUDA): that device's storages born or freed
// while fn runs become events, meta storages do not. Storages alive before are not listed (only
// meta storages are tracked between runs), and library scratch that is not a tensor (cuBLAS's
// workspace) is not seen. Shares dry_run's one-at-a-time rule.
MemoryTrace record_step(Device device, const std::function<void()>& fn);

// Steps: a training step's first run makes what every later one finds alive (optimizer state,
// the scaler's), so its prediction is the second run's. Called inside dry_run or record_step,
// mark_step() ends one step and begins the next (nothing is allocated: the trace notes the event
// index in step_starts); outside a recording it does nothing.
void mark_step();
// The trace's last step (after its last mark_step; the whole trace when there is none): its
// events, preceded by before_step Allocs for the buffers alive when it began, in the order they
// were made. Roles come from the whole recording, so state an earlier step made keeps the role
// its lifetime gave it (optimizer state), where a dry run begun at the last step would see it only
// as alive before.
MemoryTrace last_step(const MemoryTrace& trace);
// step() dry-run twice with mark_step() between them; the second run's trace (last_step).
MemoryTrace dry_run_step(Device target, const std::function<void()>& step);

// The reserved bytes the target's caching allocator would peak at on this trace: its requests
// replayed in order through a real CachingAllocator over a backing allocator that hands out
// addresses it never maps (the allocator only keeps bookkeeping about its blocks). Buffers alive
// before the step are allocated first, in trace order; a real process's earlier history (what it
// allocated and freed before) is not known, so a measured figure can be higher.
int64_t replay_reserved_bytes(const MemoryTrace& trace);

// The meta backend's workspace estimates. begin_workspace adds a Workspace buffer of `bytes`,
// alive until end_workspace(id) (returns -1 when no dry run records). hold_workspace adds one
// that is never freed, once per key per dry run (the cuBLAS workspace a CUDA context keeps).
int64_t begin_workspace(size_t bytes);
void end_workspace(int64_t id);
void hold_workspace(const char* key, size_t bytes);
// The running dry run's target (CPU when none).
Device dry_run_target();

}  // namespace mixtrain::memory
