// A recording's last step (the buffers alive at its start, then its events), the usual two-run
// dry run of a training step, and the caching allocator's reserved bytes replayed from a trace.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "mixtrain/base/error.h"
#include "mixtrain/memory/caching_allocator.h"
#include "mixtrain/memory/dry_run.h"

namespace mixtrain::memory {

MemoryTrace last_step(const MemoryTrace& trace) {
  const std::vector<MemoryEvent>& ev = trace.events;
  const size_t start = trace.step_starts.empty() ? 0 : trace.step_starts.back();
  std::unordered_map<int64_t, size_t> alive;  // buffer -> its Alloc event
  std::vector<int64_t> order;
  for (size_t i = 0; i < start && i < ev.size(); ++i) {
    if (ev[i].kind == MemoryEvent::Kind::Alloc) {
      alive[ev[i].buffer] = i;
      order.push_back(ev[i].buffer);
    } else {
      alive.erase(ev[i].buffer);
    }
  }
  MemoryTrace out;
  out.target = trace.target;
  out.assumptions = trace.assumptions;
  for (const int64_t id : order) {
    const auto it = alive.find(id);
    if (it == alive.end()) continue;
    MemoryEvent e = ev[it->second];
    e.before_step = true;
    out.events.push_back(e);
  }
  if (start < ev.size()) out.events.insert(out.events.end(), ev.begin() + static_cast<std::ptrdiff_t>(start), ev.end());
  return out;
}

MemoryTrace dry_run_step(Device target, const std::function<void()>& step) {
  MT_CHECK(static_cast<bool>(step), "memory::dry_run_step: no step function given");
  return last_step(dry_run(target, [&] {
    step();
    mark_step();
    step();
  }));
}

namespace {
// Hands out increasing addresses that are never mapped.
class UnmappedBacking : public BackingAllocator {
 public:
  void* alloc(size_t nbytes) override {
    void* p = reinterpret_cast<void*>(next_);
    next_ += (nbytes + 4095) / 4096 * 4096;
    return p;
  }
  void free(void*, size_t) override {}
  size_t free_device_memory() override { return size_t{1} << 50; }
  std::string name() const override { return "unmapped"; }

 private:
  uintptr_t next_ = uintptr_t{1} << 32;
};
}  // namespace

int64_t replay_reserved_bytes(const MemoryTrace& trace) {
  UnmappedBacking backing;
  CachingAllocator allocator(backing, trace.target);
  std::unordered_map<int64_t, void*> live;
  for (const MemoryEvent& e : trace.events) {
    if (e.kind == MemoryEvent::Kind::Alloc) {
      live[e.buffer] = allocator.allocate(e.requested);
    } else if (auto it = live.find(e.buffer); it != live.end()) {
      allocator.deallocate(it->second);
      live.erase(it);
    }
  }
  const int64_t peak = allocator.stats().peak_reserved_bytes;
  for (const auto& [id, ptr] : live) allocator.deallocate(ptr);
  return peak;
}

}  // namespace mixtrain::memory
