// What every backend's AMP kernels share: argument checks and contiguous work lists; and the
// fallback kernels for a backend that has none of its own yet (copy the operands to the host, run
// the CPU kernels, copy the results back: correct but synchronous; a device backend registers
// its own, see amp.h).
#include "backends/amp.h"
#include "backends/copy.h"
#include "mixtrain/base/grad_mode.h"

namespace mixtrain::backends {

namespace {
bool is_scalar_of(const Tensor& t, DType dt) { return t.defined() && t.numel() == 1 && t.dtype() == dt; }
}  // namespace

UnscaleWork prepare_unscale(const std::vector<Tensor>& grads, const std::vector<Tensor>& outs,
                            const Tensor& inv_scale, const Tensor& found_inf, const Tensor& stats) {
  const char* op = "non_finite_check_and_unscale";
  MT_CHECK(grads.size() == outs.size(), op, ": ", grads.size(), " gradients but ", outs.size(), " outputs");
  MT_CHECK(is_scalar_of(inv_scale, kFloat32) && is_scalar_of(found_inf, kFloat32), op,
           ": inv_scale and found_inf must be 1-element float32 tensors");
  MT_CHECK(!stats.defined() || (stats.dtype() == kFloat64 && stats.numel() == kAmpStatsSize && stats.is_contiguous()),
           op, ": stats must be a contiguous float64 tensor of ", kAmpStatsSize, " elements");
  const Device device = found_inf.device();
  MT_CHECK(inv_scale.device() == device && (!stats.defined() || stats.device() == device), op,
           ": inv_scale, found_inf and stats must be on one device, got ", inv_scale.summary(), ", ", found_inf.summary());
  UnscaleWork w;
  if (grads.empty()) return w;
  w.grad_dtype = grads[0].dtype(), w.out_dtype = outs[0].dtype();
  const DType gd = w.grad_dtype, od = w.out_dtype;
  MT_CHECK(is_floating(gd), op, ": gradients must be floating, got ", gd);
  MT_CHECK(od == gd || (od == kFloat32 && is_half(gd)), op, ": outputs must have the gradients' dtype (or float32 ",
           "for half gradients: master gradients), got ", od, " for ", gd, " gradients");
  NoGradGuard no_grad;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    const Tensor& o = outs[i];
    MT_CHECK(g.dtype() == gd && o.dtype() == od, op, ": all gradients must be ", gd, " and all outputs ", od,
             "; got ", g.summary(), " and ", o.summary(), " at index ", i, " (bucket the list by dtype)");
    MT_CHECK(g.device() == device && o.device() == device, op, ": tensors must be on ", device, ", got ", g.summary(),
             " and ", o.summary(), " at index ", i);
    MT_CHECK(g.shape() == o.shape(), op, ": gradient ", g.summary(), " and output ", o.summary(), " differ in shape");
    if (g.same_dense_layout(o)) {  // walked as flat arrays side by side
      w.grads.push_back(g);
      w.outs.push_back(o);
      continue;
    }
    // Rare (a user-set strided gradient): work on contiguous copies, copied back afterwards.
    const Tensor gc = g.contiguous();
    const Tensor oc = g.is_same(o) && gd == od ? gc : Tensor::empty(o.shape(), TensorOptions(od).device(device));
    w.grads.push_back(gc);
    w.outs.push_back(oc);
    w.copy_back.emplace_back(oc, o);
  }
  return w;
}

void check_update_scale_args(const Tensor& scale, const Tensor& growth_tracker, const Tensor& hysteresis_tracker,
                             const Tensor& found_inf, const Tensor& at_min_scale) {
  const char* op = "update_scale";
  MT_CHECK(is_scalar_of(scale, kFloat32) && is_scalar_of(found_inf, kFloat32) && is_scalar_of(at_min_scale, kFloat32),
           op, ": scale, found_inf and at_min_scale must be 1-element float32 tensors");
  MT_CHECK(is_scalar_of(growth_tracker, kInt32) && is_scalar_of(hysteresis_tracker, kInt32), op,
           ": growth_tracker and hysteresis_tracker must be 1-element int32 tensors");
  for (const Tensor* t : {&growth_tracker, &hysteresis_tracker, &found_inf, &at_min_scale})
    MT_CHECK(t->device() == scale.device(), op, ": all state must be on ", scale.device(), ", got ", t->str());
}

namespace {
Tensor to_host(const Tensor& t) {
  if (!t.defined() || t.device().is_cpu()) return t;
  Tensor h = Tensor::empty(t.shape(), TensorOptions(t.dtype()));
  copy(t, t, h);
  return h;
}
void back(const Tensor& host, const Tensor& dev) {
  if (dev.defined() && !dev.device().is_cpu()) copy(dev, host, dev);
}

void unscale_through_host(const std::vector<Tensor>& grads, const std::vector<Tensor>& outs, const Tensor& inv_scale,
                          const Tensor& found_inf, const Tensor& stats) {
  std::vector<Tensor> hg, ho;
  for (size_t i = 0; i < grads.size(); ++i) {
    hg.push_back(to_host(grads[i]));
    ho.push_back(i < outs.size() && outs[i].is_same(grads[i]) ? hg.back() : to_host(i < outs.size() ? outs[i] : Tensor()));
  }
  const Tensor hf = to_host(found_inf), hs = to_host(stats);
  non_finite_check_and_unscale(DeviceType::CPU, hg, ho, to_host(inv_scale), hf, hs);
  for (size_t i = 0; i < outs.size(); ++i) back(ho[i], outs[i]);
  back(hf, found_inf);
  back(hs, stats);
}

void update_scale_through_host(const Tensor& scale, const Tensor& growth_tracker, const Tensor& hysteresis_tracker,
                               const Tensor& found_inf, const ScaleUpdateArgs& args, const Tensor& at_min_scale) {
  const Tensor s = to_host(scale), g = to_host(growth_tracker), h = to_host(hysteresis_tracker),
               m = to_host(at_min_scale);
  update_scale(DeviceType::CPU, s, g, h, to_host(found_inf), args, m);
  back(s, scale);
  back(g, growth_tracker);
  back(h, hysteresis_tracker);
  back(m, at_min_scale);
}
}  // namespace

void register_amp_fallback() {
  non_finite_check_and_unscale.set_fallback(unscale_through_host);
  update_scale.set_fallback(update_scale_through_host);
}

}  // namespace mixtrain::backends
