// Default AMP kernels for a backend that has none of its own yet: copy the operands to the host,
// run the CPU kernels, copy the results back. Correct but synchronous; a device backend
// overrides both with kernels (see backend.h).
#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"

namespace mixtrain::backends {

namespace {
Tensor to_host(Backend& self, const Tensor& t) {
  if (!t.defined() || t.device().is_cpu()) return t;
  Tensor h = Tensor::empty(t.shape(), TensorOptions(t.dtype()));
  self.copy(t, h);
  return h;
}
void back(Backend& self, const Tensor& host, const Tensor& dev) {
  if (dev.defined() && !dev.device().is_cpu()) self.copy(host, dev);
}
}  // namespace

void Backend::non_finite_check_and_unscale(const std::vector<Tensor>& grads, const std::vector<Tensor>& outs,
                                           const Tensor& inv_scale, const Tensor& found_inf, const Tensor& stats) {
  std::vector<Tensor> hg, ho;
  for (size_t i = 0; i < grads.size(); ++i) {
    hg.push_back(to_host(*this, grads[i]));
    ho.push_back(i < outs.size() && outs[i].is_same(grads[i]) ? hg.back() : to_host(*this, i < outs.size() ? outs[i] : Tensor()));
  }
  const Tensor hf = to_host(*this, found_inf), hs = to_host(*this, stats);
  cpu::cpu_backend().non_finite_check_and_unscale(hg, ho, to_host(*this, inv_scale), hf, hs);
  for (size_t i = 0; i < outs.size(); ++i) back(*this, ho[i], outs[i]);
  back(*this, hf, found_inf);
  back(*this, hs, stats);
}

void Backend::update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& hysteresis_tracker,
                           const Tensor& found_inf, const ScaleUpdateArgs& args, const Tensor& at_min_scale) {
  const Tensor s = to_host(*this, scale), g = to_host(*this, growth_tracker), h = to_host(*this, hysteresis_tracker),
               m = to_host(*this, at_min_scale);
  cpu::cpu_backend().update_scale(s, g, h, to_host(*this, found_inf), args, m);
  back(*this, s, scale);
  back(*this, g, growth_tracker);
  back(*this, h, hysteresis_tracker);
  back(*this, m, at_min_scale);
}

}  // namespace mixtrain::backends
