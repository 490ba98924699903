#include "mixtrain/base/grad_mode.h"

namespace mixtrain::autograd {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_checkpoint_recompute = false;
}

bool is_grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }
bool is_checkpoint_recompute() { return t_checkpoint_recompute; }
void set_checkpoint_recompute(bool recomputing) { t_checkpoint_recompute = recomputing; }

}  // namespace mixtrain::autograd
