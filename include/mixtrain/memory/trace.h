#pragma once
// What a step allocates, in order: the trace a memory::dry_run records (dry_run.h), and the
// labels it carries. Each storage born or freed while a recorder runs is one event with its bytes
// as the target's caching allocator rounds them, its role, the op or autograd node that asked for
// it, and the phase. Views share their base's storage, so they add no event (docs/MEMORY.md).
//
// The labels come from cheap per-thread scopes: the dispatch layer names the outermost op, the
// autograd engine names each node and sets the backward phase, optimizers and the GradScaler set
// the optimizer phase. With no recorder active they cost one relaxed atomic load.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mixtrain/base/device.h"

namespace mixtrain::memory {

enum class Role : uint8_t {
  Parameter,       // module parameters and buffers
  Gradient,        // .grad of leaves, fp32 master gradients
  OptimizerState,  // moments, step counters, scaler state
  MasterWeight,    // fp32 copies of half parameters
  Activation,      // forward results alive past the forward phase (saved for backward, outputs)
  Temporary,       // freed in the phase that made it
  Workspace,       // library scratch estimated for the target (cuBLAS / cuDNN / reductions)
  Input,           // alive before the step and of no role above: the batch, targets
  Fp8Copy,         // fp8 copies of weights and activations the fp8 GEMMs read (amp/fp8.h)
  Fp8State,        // fp8 scaling state: scales, inverse scales, amax histories
};
constexpr int kNumRoles = 10;
enum class Phase : uint8_t { Forward, Backward, Optimizer };
constexpr int kNumPhases = 3;

const char* role_name(Role role);    // "parameter", "gradient", "optimizer_state", ...
const char* phase_name(Phase phase);  // "forward", "backward", "optimizer"

struct MemoryEvent {
  enum class Kind : uint8_t { Alloc, Free };
  Kind kind = Kind::Alloc;
  int64_t buffer = 0;     // the same id on a buffer's Alloc and Free
  size_t bytes = 0;       // CachingAllocator::round_size(requested)
  size_t requested = 0;   // the storage's size
  Role role = Role::Temporary;
  Phase phase = Phase::Forward;  // the phase this event happened in
  const char* op = "";    // op or autograd node that asked (a static string; "" when none)
  bool before_step = false;  // an Alloc for a buffer alive when the recording started
};

// One in-step buffer for the arena planner (memory/plan.h): event indices of its birth and death.
struct BufferLifetime {
  size_t bytes;
  int64_t alloc_at;
  int64_t free_at;
};

struct MemoryTrace {
  Device target;
  std::vector<MemoryEvent> events;
  // Values a meta step could not read and the path it took instead (e.g. GradScaler: "found_inf
  // assumed 0: the step was taken").
  std::vector<std::string> assumptions;
  // Where each step after the first begins: the index of its first event, one per mark_step()
  // called while recording (dry_run.h).
  std::vector<size_t> step_starts;

  int64_t peak_bytes() const;        // most bytes live at once, buffers alive before the step included
  int64_t persistent_bytes() const;  // alive across the step: allocated before it or not freed by its end
  int64_t in_step_peak_bytes() const;  // most bytes of in-step buffers (lifetimes()) live at once
  // Bytes of the buffers live at the peak instant, by role (what the peak is made of).
  std::array<int64_t, kNumRoles> peak_by_role() const;
  // Bytes allocated during the step, by role and by phase (every Alloc counted once).
  std::array<int64_t, kNumRoles> allocated_by_role() const;
  std::array<int64_t, kNumPhases> allocated_by_phase() const;
  // The most bytes live at any event of each phase (0 for a phase with no event).
  std::array<int64_t, kNumPhases> peak_by_phase() const;
  // Buffers both allocated and freed inside the step, in allocation order.
  std::vector<BufferLifetime> lifetimes() const;
  // Index of the event after which the live bytes peak (-1 for an empty trace).
  int64_t peak_event() const;
};

// True while a dry run records (any thread). One relaxed load: hot paths test it first.
namespace detail {
extern std::atomic<bool> g_recording;
}
inline bool recording() { return detail::g_recording.load(std::memory_order_relaxed); }

// The phase events of this thread are labelled with. Forward unless a scope says otherwise.
class PhaseScope {
 public:
  explicit PhaseScope(Phase phase);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase prev_;
};
Phase current_phase();

// Names the op (or autograd node) this thread's allocations are charged to. `name` must be a
// static string. A nested scope keeps the outer name unless `override_outer` (the engine names
// each node; ops called inside it keep that name).
class OpLabelScope {
 public:
  explicit OpLabelScope(const char* name, bool override_outer = false);
  ~OpLabelScope();
  OpLabelScope(const OpLabelScope&) = delete;
  OpLabelScope& operator=(const OpLabelScope&) = delete;

 private:
  const char* prev_;
};
const char* current_op();

// Gives a storage (StorageImpl*, as a key) a role, overriding the one the recorder would infer.
// Cheap unless the storage is on meta or a recorder runs.
void tag_role_slow(const void* storage, Role role);
inline void tag_role(const void* storage, Device device, Role role) {
  if (device.is_meta() || recording()) tag_role_slow(storage, role);
}

// Called where a meta step had to assume a value it cannot read (`what` says which and the path
// taken); recorded once per distinct text into the running dry run's trace.
void note_assumption(const char* what);

// The device type whose autocast state meta tensors follow: the running dry run's target, so a
// dry run under AutocastGuard(kCPU, ...) casts what the real CPU step casts; Meta when none runs.
DeviceType meta_autocast_device_type();

namespace detail {
// OpLabelScope's two halves, for scopes that label only while recording (ops::OpScope).
const char* push_op_label(const char* name, bool override_outer);  // returns the previous label
void pop_op_label(const char* previous);
// Called by every StorageImpl; report to the recorder and keep the list of live meta storages.
void on_storage_created(const void* storage, size_t nbytes, Device device);
void on_storage_destroyed(const void* storage, Device device);
}  // namespace detail

}  // namespace mixtrain::memory
