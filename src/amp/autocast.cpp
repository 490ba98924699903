// AutocastGuard and the thread-local autocast state it saves and restores.
#include "mixtrain/amp/autocast.h"

#include "amp/autocast_internal.h"
#include "mixtrain/core/error.h"
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
}

AutocastGuard::~AutocastGuard() {
  detail::ThreadState& s = detail::thread_state();
  // The cache lives for one outermost scope (as PyTorch's), so casts do not outlive the scope
  // that made them; within a scope an entry is also dropped when its weight's version moves.
  if (--s.nesting == 0) detail::clear_thread_cache();
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
