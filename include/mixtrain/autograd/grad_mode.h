#pragma once
// Thread-local switch for recording autograd history.

namespace mixtrain {

namespace autograd {
bool is_grad_enabled();
void set_grad_enabled(bool enabled);
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

}  // namespace mixtrain
