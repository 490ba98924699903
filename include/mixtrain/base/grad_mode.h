#pragma once
// Thread-local switch for recording autograd history.

namespace mixtrain {

namespace autograd {
bool is_grad_enabled();
void set_grad_enabled(bool enabled);
// True while nn::checkpoint recomputes its region in backward: updates of module state that the
// forward already made once (BatchNorm's running statistics and batch count) are skipped.
bool is_checkpoint_recompute();
void set_checkpoint_recompute(bool recomputing);
}  // namespace autograd

// RAII: ops inside the scope record no history (like torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(autograd::is_grad_enabled()) { autograd::set_grad_enabled(false); }
  ~NoGradGuard() { autograd::set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// RAII: sets grad mode to a given value for the scope.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : prev_(autograd::is_grad_enabled()) { autograd::set_grad_enabled(enabled); }
  ~AutoGradMode() { autograd::set_grad_enabled(prev_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};

// libtorch's GradMode::is_enabled() / set_enabled().
struct GradMode {
  static bool is_enabled() { return autograd::is_grad_enabled(); }
  static void set_enabled(bool enabled) { autograd::set_grad_enabled(enabled); }
};

// The guards are mixtrain::NoGradGuard as torch::NoGradGuard is; also reachable as
// mixtrain::autograd::NoGradGuard for code that spells the autograd namespace.
namespace autograd {
using mixtrain::AutoGradMode;
using mixtrain::GradMode;
using mixtrain::NoGradGuard;
}  // namespace autograd

// RAII: marks the scope as a checkpoint's recomputation (autograd::is_checkpoint_recompute).
class CheckpointRecomputeGuard {
 public:
  CheckpointRecomputeGuard() : prev_(autograd::is_checkpoint_recompute()) { autograd::set_checkpoint_recompute(true); }
  ~CheckpointRecomputeGuard() { autograd::set_checkpoint_recompute(prev_); }
  CheckpointRecomputeGuard(const CheckpointRecomputeGuard&) = delete;
  CheckpointRecomputeGuard& operator=(const CheckpointRecomputeGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace mixtrain
