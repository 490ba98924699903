// MemoryTrace's summaries: peaks, persistent bytes, breakdowns and in-step lifetimes, all by one
// walk over the events in order.
#include "mixtrain/memory/trace.h"

#include <unordered_map>

namespace mixtrain::memory {

const char* role_name(Role role) {
  static constexpr const char* names[] = {"parameter",  "gradient",  "optimizer_state", "master_weight",
                                          "activation", "temporary", "workspace",       "input"};
  static_assert(sizeof(names) / sizeof(names[0]) == kNumRoles);
  return names[static_cast<int>(role)];
}

const char* phase_name(Phase phase) {
  static constexpr const char* names[] = {"forward", "backward", "optimizer"};
  static_assert(sizeof(names) / sizeof(names[0]) == kNumPhases);
  return names[static_cast<int>(phase)];
}

namespace {
int64_t signed_bytes(const MemoryEvent& e) {
  const auto b = static_cast<int64_t>(e.bytes);
  return e.kind == MemoryEvent::Kind::Alloc ? b : -b;
}
}  // namespace

int64_t MemoryTrace::peak_event() const {
  int64_t live = 0, peak = -1, at = -1;
  for (size_t i = 0; i < events.size(); ++i) {
    live += signed_bytes(events[i]);
    if (live > peak) peak = live, at = static_cast<int64_t>(i);
  }
  return at;
}

int64_t MemoryTrace::peak_bytes() const {
  int64_t live = 0, peak = 0;
  for (const MemoryEvent& e : events) {
    live += signed_bytes(e);
    if (live > peak) peak = live;
  }
  return peak;
}

int64_t MemoryTrace::persistent_bytes() const {
  // Whatever is live after the last event was allocated before the step or never freed in it;
  // buffers allocated before the step and freed during it were alive across the step's start.
  int64_t bytes = 0;
  std::unordered_map<int64_t, bool> before;
  for (const MemoryEvent& e : events) {
    if (e.kind == MemoryEvent::Kind::Alloc) {
      before[e.buffer] = e.before_step;
      bytes += static_cast<int64_t>(e.bytes);
    } else if (!before[e.buffer]) {
      bytes -= static_cast<int64_t>(e.bytes);
    }
  }
  return bytes;
}

std::vector<BufferLifetime> MemoryTrace::lifetimes() const {
  std::vector<BufferLifetime> out;
  std::unordered_map<int64_t, size_t> open;  // buffer id -> index into out
  for (size_t i = 0; i < events.size(); ++i) {
    const MemoryEvent& e = events[i];
    if (e.kind == MemoryEvent::Kind::Alloc) {
      if (e.before_step) continue;
      open[e.buffer] = out.size();
      out.push_back({e.bytes, static_cast<int64_t>(i), -1});
    } else if (auto it = open.find(e.buffer); it != open.end()) {
      out[it->second].free_at = static_cast<int64_t>(i);
      open.erase(it);
    }
  }
  std::vector<BufferLifetime> freed;
  freed.reserve(out.size());
  for (const BufferLifetime& b : out)
    if (b.free_at >= 0) freed.push_back(b);
  return freed;
}

int64_t MemoryTrace::in_step_peak_bytes() const {
  const std::vector<BufferLifetime> bufs = lifetimes();
  std::vector<int64_t> delta(events.size() + 1, 0);
  for (const BufferLifetime& b : bufs) {
    delta[static_cast<size_t>(b.alloc_at)] += static_cast<int64_t>(b.bytes);
    delta[static_cast<size_t>(b.free_at)] -= static_cast<int64_t>(b.bytes);
  }
  int64_t live = 0, peak = 0;
  for (int64_t d : delta) {
    live += d;
    if (live > peak) peak = live;
  }
  return peak;
}

std::array<int64_t, kNumRoles> MemoryTrace::peak_by_role() const {
  std::array<int64_t, kNumRoles> out{};
  const int64_t at = peak_event();
  for (int64_t i = 0; i <= at; ++i) {
    const MemoryEvent& e = events[static_cast<size_t>(i)];
    out[static_cast<int>(e.role)] += signed_bytes(e);
  }
  return out;
}

std::array<int64_t, kNumRoles> MemoryTrace::allocated_by_role() const {
  std::array<int64_t, kNumRoles> out{};
  for (const MemoryEvent& e : events)
    if (e.kind == MemoryEvent::Kind::Alloc && !e.before_step) out[static_cast<int>(e.role)] += static_cast<int64_t>(e.bytes);
  return out;
}

std::array<int64_t, kNumPhases> MemoryTrace::allocated_by_phase() const {
  std::array<int64_t, kNumPhases> out{};
  for (const MemoryEvent& e : events)
    if (e.kind == MemoryEvent::Kind::Alloc && !e.before_step) out[static_cast<int>(e.phase)] += static_cast<int64_t>(e.bytes);
  return out;
}

std::array<int64_t, kNumPhases> MemoryTrace::peak_by_phase() const {
  std::array<int64_t, kNumPhases> out{};
  int64_t live = 0;
  for (const MemoryEvent& e : events) {
    live += signed_bytes(e);
    int64_t& p = out[static_cast<int>(e.phase)];
    if (live > p) p = live;
  }
  return out;
}

}  // namespace mixtrain::memory
