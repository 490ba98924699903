#pragma once
// The pre-dispatch hook: every public op entry offers its floating inputs (and its optional
// dtype argument) to the hook before autograd records the call. autocast installs the hook; the
// ops layer knows nothing of autocast. Nested op calls made inside an op's implementation see no
// hook, so composites are cast once, at the outside.
#include <optional>

#include "mixtrain/base/dtype.h"
#include "mixtrain/ops/op_list.h"

namespace mixtrain {
class Tensor;
}

namespace mixtrain::ops {

struct DispatchArgs {
  OpId op;
  Tensor* const* tensors;  // the op's tensor arguments, may be replaced by casts
  int num_tensors;
  std::optional<DType>* dtype;  // the op's dtype argument, or nullptr when it has none
};

using PreDispatchHook = void (*)(DispatchArgs& args);

void set_pre_dispatch_hook(PreDispatchHook hook);
PreDispatchHook pre_dispatch_hook();  // the installed hook (nullptr: none), to restore after a swap

// Per-thread switch the hook's owner flips when its state changes, so ops pay one thread-local
// read when no hook applies.
void set_hook_active_for_thread(bool active);

// RAII scope around an op's implementation: runs the hook (when active and not nested), then
// suppresses it for nested calls.
class OpScope {
 public:
  OpScope(OpId op, std::initializer_list<Tensor*> tensors, std::optional<DType>* dtype = nullptr);
  // For ops over a list of tensors (cat, stack).
  OpScope(OpId op, Tensor* const* tensors, int num_tensors, std::optional<DType>* dtype = nullptr);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  // While a memory::dry_run records, the outermost op names the allocations made inside it.
  bool labelled_ = false;
  const char* prev_label_ = nullptr;
};

// Suppresses the hook (the autograd engine holds one while backward runs).
class HookExcludeGuard {
 public:
  HookExcludeGuard();
  ~HookExcludeGuard();
  HookExcludeGuard(const HookExcludeGuard&) = delete;
  HookExcludeGuard& operator=(const HookExcludeGuard&) = delete;
};

// Lifts the suppression for a region: a custom op's backward that runs under its forward's
// autocast state (amp::custom_function) calls ops as if at the top level.
class HookResumeGuard {
 public:
  HookResumeGuard();
  ~HookResumeGuard();
  HookResumeGuard(const HookResumeGuard&) = delete;
  HookResumeGuard& operator=(const HookResumeGuard&) = delete;

 private:
  int saved_depth_;
};

}  // namespace mixtrain::ops
