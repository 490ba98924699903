#pragma once
// Static plans keyed by what shapes a step: the first step of a key (say the input's shape) is
// recorded into a new plan, later steps of that key replay it. A last partial batch, or another
// sequence length, then gets a plan of its own instead of missing every epoch. See
// docs/MEMORY.md, "Static plans".
//
//   memory::PlanCache plans(Device::cpu());
//   for (auto& [x, y] : loader) float loss = plans.run(x.shape(), [&] { return step(x, y); });
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixtrain/memory/step_plan.h"

namespace mixtrain::memory {

class PlanCache {
 public:
  // Keeps at most `capacity` plans (>= 1); a new key beyond that drops the least recently used
  // plan, and its arena, before its first step is recorded.
  explicit PlanCache(Device device, size_t capacity = 2);
  explicit PlanCache(CachingAllocator& allocator, size_t capacity = 2);

  // Replays the key's plan, or runs fn as plan_step does and keeps its plan under the key.
  // Returns what fn returns; throws as StepPlan::run and plan_step do.
  template <class F>
  decltype(auto) run(const std::vector<int64_t>& key, F&& fn) {
    if (StepPlan* plan = find(key)) return plan->run(std::forward<F>(fn));
    make_room();
    detail::PlanRecorder recorder(*allocator_);
    if constexpr (std::is_void_v<std::invoke_result_t<F&>>) {
      fn();
      add(key, StepPlan(recorder.finish()));
    } else {
      decltype(auto) out = fn();
      add(key, StepPlan(recorder.finish()));
      return out;
    }
  }

  size_t size() const { return entries_.size(); }
  const StepPlan* plan(const std::vector<int64_t>& key) const;  // nullptr when none

 private:
  struct Entry {
    std::vector<int64_t> key;
    StepPlan plan;
    uint64_t last_used;
  };
  StepPlan* find(const std::vector<int64_t>& key);
  void make_room();
  void add(const std::vector<int64_t>& key, StepPlan plan);

  CachingAllocator* allocator_;
  size_t capacity_;
  uint64_t clock_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace mixtrain::memory
