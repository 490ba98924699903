#pragma once
// Planned execution: plan_step records one real step at the caching-allocator level, plans its
// in-step buffers into one arena (plan.h), and StepPlan::run replays later steps from that arena:
// each in-step request is checked against the recording in O(1) and served without a lock, a
// search or a backing allocation. See docs/MEMORY.md, "Static plans".
//
//   memory::StepPlan plan = memory::plan_step(Device::cpu(), [&] { loss_value = step(x, y); });
//   for (...) plan.run([&] { loss_value = step(x, y); });
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixtrain/base/device.h"
#include "mixtrain/memory/caching_allocator.h"
#include "mixtrain/memory/plan.h"
#include "mixtrain/memory/trace.h"

namespace mixtrain::memory {

namespace detail {

struct PlanState;

// Records the calling thread's requests to one allocator from construction to finish().
class PlanRecorder {
 public:
  explicit PlanRecorder(CachingAllocator& allocator);
  ~PlanRecorder();  // without finish() (the step threw): stops recording, leaves no plan
  PlanRecorder(const PlanRecorder&) = delete;
  PlanRecorder& operator=(const PlanRecorder&) = delete;
  std::shared_ptr<PlanState> finish();

 private:
  class Session;
  std::unique_ptr<Session> session_;
  CachingAllocator* allocator_;
};

// Serves the calling thread's requests from a plan between construction and finish() (or
// destruction, when the step threw).
class PlanReplay {
 public:
  explicit PlanReplay(PlanState& state);
  void finish();
  ~PlanReplay();
  PlanReplay(const PlanReplay&) = delete;
  PlanReplay& operator=(const PlanReplay&) = delete;

 private:
  class Session;
  std::unique_ptr<Session> session_;
};

// The device's allocator, which must be a CachingAllocator (a clear error otherwise).
CachingAllocator& caching_allocator_of(Device device);

}  // namespace detail

class StepPlan {
 public:
  // Runs one step: requests in the recorded order and sizes come from the arena; from the first
  // that differs (another size or order) to the end of the step, from the caching allocator, and
  // the step counts one num_plan_misses. Returns what fn returns; fn's requests that outlived the
  // recorded step (its result, optimizer state, gradients...) come from the caching allocator.
  // One run of a plan at a time, on the thread that calls run. The first run also records: when
  // it differs from the recorded step (Adam creates its state on the first step only), the plan
  // follows it from then on, so steady steps replay without misses from the second run.
  template <class F>
  decltype(auto) run(F&& fn) {
    detail::PlanReplay replay(*state_);
    if constexpr (std::is_void_v<std::invoke_result_t<F&>>) {
      fn();
      replay.finish();
    } else {
      decltype(auto) out = fn();
      replay.finish();
      return out;
    }
  }

  size_t arena_bytes() const;        // the arena in-step buffers are planned into
  size_t lower_bound_bytes() const;  // peak of in-step bytes live at once in the recorded step
  size_t first_fit_bytes() const;    // Caffe's first-fit slots on the same buffers
  // Peak of the bytes allocated beside the in-step ones (everything alive before the step and
  // what outlived it); arena_bytes() + this must fit under the allocator's limit.
  size_t other_peak_bytes() const;
  int64_t num_requests() const;      // allocate() calls of the recorded step
  int64_t num_planned() const;       // those freed inside it: the arena's buffers
  const std::vector<BufferLifetime>& lifetimes() const;  // of the planned buffers, in request order
  const ArenaPlan& arena_plan() const;

 private:
  template <class F>
  friend StepPlan plan_step(CachingAllocator& allocator, F&& fn);
  friend class PlanCache;
  explicit StepPlan(std::shared_ptr<detail::PlanState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::PlanState> state_;
};

// Runs fn once, for real, as a step of training, recording its requests to `allocator` on this
// thread, and returns the plan (what fn returns is dropped after the recording ends, so it counts
// as outliving the step). Throws, leaving no plan and no recording behind, when fn throws, when
// a recording or replay is already active on this thread, or when the arena beside the bytes
// that outlive the step exceeds the allocator's limit (MIXTRAIN_MEMORY_LIMIT_MB). The allocator
// must outlive the plan.
template <class F>
StepPlan plan_step(CachingAllocator& allocator, F&& fn) {
  detail::PlanRecorder recorder(allocator);
  if constexpr (std::is_void_v<std::invoke_result_t<F&>>) {
    fn();
    return StepPlan(recorder.finish());
  } else {
    auto&& kept = fn();
    (void)kept;
    return StepPlan(recorder.finish());
  }
}

template <class F>
StepPlan plan_step(Device device, F&& fn) {
  return plan_step(detail::caching_allocator_of(device), std::forward<F>(fn));
}

}  // namespace mixtrain::memory
