#include "mixtrain/ops/dispatch.h"

#include <atomic>

#include "mixtrain/memory/trace.h"

namespace mixtrain::ops {

namespace {
std::atomic<PreDispatchHook> g_hook{nullptr};
thread_local bool t_hook_active = false;
thread_local int t_exclude_depth = 0;
}  // namespace

void set_pre_dispatch_hook(PreDispatchHook hook) { g_hook.store(hook); }
PreDispatchHook pre_dispatch_hook() { return g_hook.load(); }
void set_hook_active_for_thread(bool active) { t_hook_active = active; }

OpScope::OpScope(OpId op, std::initializer_list<Tensor*> tensors, std::optional<DType>* dtype)
    : OpScope(op, tensors.begin(), static_cast<int>(tensors.size()), dtype) {}

OpScope::OpScope(OpId op, Tensor* const* tensors, int num_tensors, std::optional<DType>* dtype) {
  if (memory::recording()) {
    labelled_ = true;
    prev_label_ = memory::detail::push_op_label(op_name(op), false);
  }
  if (t_hook_active && t_exclude_depth == 0) {
    if (PreDispatchHook hook = g_hook.load(std::memory_order_relaxed)) {
      DispatchArgs args{op, tensors, num_tensors, dtype};
      hook(args);
    }
  }
  ++t_exclude_depth;
}

OpScope::~OpScope() {
  --t_exclude_depth;
  if (labelled_) memory::detail::pop_op_label(prev_label_);
}

HookExcludeGuard::HookExcludeGuard() { ++t_exclude_depth; }
HookExcludeGuard::~HookExcludeGuard() { --t_exclude_depth; }

HookResumeGuard::HookResumeGuard() : saved_depth_(t_exclude_depth) { t_exclude_depth = 0; }
HookResumeGuard::~HookResumeGuard() { t_exclude_depth = saved_depth_; }

}  // namespace mixtrain::ops
