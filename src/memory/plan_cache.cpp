// PlanCache: static plans by key, least recently used dropped first (memory/plan_cache.h).
#include "mixtrain/memory/plan_cache.h"

#include <algorithm>

#include "mixtrain/base/error.h"

namespace mixtrain::memory {

PlanCache::PlanCache(Device device, size_t capacity) : PlanCache(detail::caching_allocator_of(device), capacity) {}

PlanCache::PlanCache(CachingAllocator& allocator, size_t capacity) : allocator_(&allocator), capacity_(capacity) {
  MT_CHECK(capacity >= 1, "PlanCache: capacity ", capacity, " must be at least 1");
}

const StepPlan* PlanCache::plan(const std::vector<int64_t>& key) const {
  for (const Entry& e : entries_)
    if (e.key == key) return &e.plan;
  return nullptr;
}

StepPlan* PlanCache::find(const std::vector<int64_t>& key) {
  for (Entry& e : entries_)
    if (e.key == key) {
      e.last_used = ++clock_;
      return &e.plan;
    }
  return nullptr;
}

void PlanCache::make_room() {
  if (entries_.size() < capacity_) return;
  auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                 [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
  entries_.erase(oldest);  // its arena goes back before the new step is recorded
}

void PlanCache::add(const std::vector<int64_t>& key, StepPlan plan) {
  entries_.push_back({key, std::move(plan), ++clock_});
}

}  // namespace mixtrain::memory
