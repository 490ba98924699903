// MemoryTrace's summaries: peaks, persistent bytes, breakdowns and in-step lifetimes, all by one
// walk over the events in order.
#include "mixtrain/memory/trace.h"

#include <unordered_map>

#include "mixtrain/base/checked_int.h"

namespace mixtrain::memory {

const char* role_name(Role role) {
  static constexpr const char* names[] = {"parameter", "gradient",  "optimizer_state", "master_weight", "activation",
                                          "temporary", "workspace", "input",           "fp8_copy",      "fp8_state"};
  static_assert(sizeof(names) / sizeof(names[0]) == kNumRoles);
  return names[static_cast<int>(role)];
}

const char* phase_name(Phase phase) {
  static constexpr const char* names[] = {"forward", "backward", "optimizer"};
  static_assert(sizeof(names) / sizeof(names[0]) == kNumPhases);
  return names[static_cast<int>(phase)];
}

namespace {
// Every sum below is checked: bytes live at once past 2^63 - 1 (meta tensors of any size can be
// made) are an Error naming the summary, never a wrapped figure.
int64_t bytes_of(const MemoryEvent& e, const char* what) { return checked_int64(e.bytes, what); }

int64_t after(int64_t live, const MemoryEvent& e, const char* what) {
  const int64_t b = bytes_of(e, what);
  return e.kind == MemoryEvent::Kind::Alloc ? checked_add(live, b, what) : checked_sub(live, b, what);
}
}  // namespace

int64_t MemoryTrace::peak_event() const {
  int64_t live = 0, peak = -1, at = -1;
  for (size_t i = 0; i < events.size(); ++i) {
    live = after(live, events[i], "MemoryTrace::peak_event: bytes live");
    if (live > peak) peak = live, at = static_cast<int64_t>(i);
  }
  return at;
}

int64_t MemoryTrace::peak_bytes() const {
  int64_t live = 0, peak = 0;
  for (const MemoryEvent& e : events) {
    live = after(live, e, "MemoryTrace::peak_bytes: bytes live");
    if (live > peak) peak = live;
  }
  return peak;
}

int64_t MemoryTrace::persistent_bytes() const {
  // Whatever is live after the last event was allocated before the step or never freed in it;
  // buffers allocated before the step and freed during it were alive across the step's start.
  const char* what = "MemoryTrace::persistent_bytes";
  int64_t bytes = 0;
  std::unordered_map<int64_t, bool> before;
  for (const MemoryEvent& e : events) {
    if (e.kind == MemoryEvent::Kind::Alloc) before[e.buffer] = e.before_step;
    if (e.kind == MemoryEvent::Kind::Alloc || !before[e.buffer]) bytes = after(bytes, e, what);
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
  const char* what = "MemoryTrace::in_step_peak_bytes: bytes live";
  const std::vector<BufferLifetime> bufs = lifetimes();
  std::vector<int64_t> delta(events.size() + 1, 0);
  for (const BufferLifetime& b : bufs) {
    const int64_t bytes = checked_int64(b.bytes, what);
    delta[static_cast<size_t>(b.alloc_at)] = checked_add(delta[static_cast<size_t>(b.alloc_at)], bytes, what);
    delta[static_cast<size_t>(b.free_at)] = checked_sub(delta[static_cast<size_t>(b.free_at)], bytes, what);
  }
  int64_t live = 0, peak = 0;
  for (int64_t d : delta) {
    live = checked_add(live, d, what);
    if (live > peak) peak = live;
  }
  return peak;
}

std::array<int64_t, kNumRoles> MemoryTrace::peak_by_role() const {
  std::array<int64_t, kNumRoles> out{};
  const int64_t at = peak_event();
  for (int64_t i = 0; i <= at; ++i) {
    const MemoryEvent& e = events[static_cast<size_t>(i)];
    int64_t& role = out[static_cast<int>(e.role)];
    role = after(role, e, "MemoryTrace::peak_by_role: bytes live");
  }
  return out;
}

std::array<int64_t, kNumRoles> MemoryTrace::allocated_by_role() const {
  std::array<int64_t, kNumRoles> out{};
  for (const MemoryEvent& e : events)
    if (e.kind == MemoryEvent::Kind::Alloc && !e.before_step)
      out[static_cast<int>(e.role)] = after(out[static_cast<int>(e.role)], e, "MemoryTrace::allocated_by_role");
  return out;
}

std::array<int64_t, kNumPhases> MemoryTrace::allocated_by_phase() const {
  std::array<int64_t, kNumPhases> out{};
  for (const MemoryEvent& e : events)
    if (e.kind == MemoryEvent::Kind::Alloc && !e.before_step)
      out[static_cast<int>(e.phase)] = after(out[static_cast<int>(e.phase)], e, "MemoryTrace::allocated_by_phase");
  return out;
}

std::array<int64_t, kNumPhases> MemoryTrace::peak_by_phase() const {
  std::array<int64_t, kNumPhases> out{};
  int64_t live = 0;
  for (const MemoryEvent& e : events) {
    live = after(live, e, "MemoryTrace::peak_by_phase: bytes live");
    int64_t& p = out[static_cast<int>(e.phase)];
    if (live > p) p = live;
  }
  return out;
}

}  // namespace mixtrain::memory
