// AutocastGuard and the thread-local autocast state it saves and restores.
#include "mixtrain/amp/autocast.h"

#include <algorithm>
#include <vector>

#include "amp/autocast_internal.h"
#include "mixtrain/base/error.h"
#include "mixtrain/ops/dispatch.h"

namespace mixtrain::amp {

namespace detail {

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

}  // namespace detail

namespace {

// Ops pay for the hook only on threads where some device type has autocast on.
void sync_hook_flag(const detail::ThreadState& s) {
  bool any = false;
  for (bool e : s.enabled) any = any || e;
  ops::set_hook_active_for_thread(any);
}

// This thread's live guards, oldest first, so that a guard destroyed out of order (heap
// allocated guards) unlinks itself instead of restoring a state that a newer guard replaced.
std::vector<AutocastGuard*>& live_guards() {
  thread_local std::vector<AutocastGuard*> guards;
  return guards;
}

}  // namespace

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled, bool cache_enabled) : device_(device) {
  // Checked even when disabled: a wrong dtype is a bug in the caller whatever the flag says.
  MT_CHECK(dtype == kFloat16 || dtype == kBFloat16, "AutocastGuard(", device, "): unsupported autocast dtype ", dtype,
           "; expected float16 or bfloat16");
  detail::install_hook_once();
  detail::ThreadState& s = detail::thread_state();
  const int d = detail::device_index(device);
  prev_enabled_ = s.enabled[d];
  prev_dtype_ = s.dtype[d];
  prev_cache_enabled_ = s.cache_enabled;
  s.enabled[d] = enabled;
  s.dtype[d] = dtype;
  s.cache_enabled = cache_enabled;
  ++s.nesting;
  sync_hook_flag(s);
  live_guards().push_back(this);
}

AutocastGuard::~AutocastGuard() {
  detail::ThreadState& s = detail::thread_state();
  // The cache lives for one outermost scope (as PyTorch's), so casts do not outlive the scope
  // that made them; within a scope an entry is also dropped when its weight's version moves.
  if (--s.nesting == 0) detail::clear_thread_cache();
  auto& guards = live_guards();
  const auto self = std::find(guards.begin(), guards.end(), this);
  if (self != guards.end() && self + 1 != guards.end()) {
    // Destroyed before a newer guard: the state stays the newer guards'; the next newer guard
    // (of this device, for the device's settings) inherits what this one would have restored.
    bool device_done = false;
    for (auto it = self + 1; it != guards.end(); ++it) {
      if (it == self + 1) (*it)->prev_cache_enabled_ = prev_cache_enabled_;
      if (!device_done && (*it)->device_ == device_) {
        (*it)->prev_enabled_ = prev_enabled_;
        (*it)->prev_dtype_ = prev_dtype_;
        device_done = true;
      }
    }
    if (!device_done) {
      const int d = detail::device_index(device_);
      s.enabled[d] = prev_enabled_;
      s.dtype[d] = prev_dtype_;
      sync_hook_flag(s);
    }
    guards.erase(self);
    return;
  }
  if (self != guards.end()) guards.erase(self);
  const int d = detail::device_index(device_);
  s.enabled[d] = prev_enabled_;
  s.dtype[d] = prev_dtype_;
  s.cache_enabled = prev_cache_enabled_;
  sync_hook_flag(s);
}

bool is_autocast_enabled(DeviceType device) { return detail::thread_state().enabled[detail::device_index(device)]; }
DType autocast_dtype(DeviceType device) { return detail::thread_state().dtype[detail::device_index(device)]; }
bool is_autocast_cache_enabled() { return detail::thread_state().cache_enabled; }

}  // namespace mixtrain::amp
