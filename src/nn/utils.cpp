#include "mixtrain/nn/utils.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/reduce.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/memory/dry_run.h"
#include "mixtrain/memory/trace.h"
#include "mixtrain/ops/functional.h"

namespace mixtrain::nn::utils {

namespace {

// Two partial results of one norm: the larger for the inf-norm (NaN propagates, as torch.max
// does), else the sum. On the host in fp64, or as 0-d device tensors.
double combine_parts(bool inf, double total, double part) {
  return inf ? ((part > total || part != part) ? part : total) : total + part;
}
Tensor combine_parts(bool inf, const Tensor& total, const Tensor& part) {
  return inf ? maximum(total, part) : add(total, part);
}

// The total norm from its combined parts: their p-th root (the inf-norm is the part itself).
template <class V>
V finish_norm(double p, const V& acc) {
  using std::pow;
  using std::sqrt;
  return std::isinf(p) ? acc : (p == 2.0 ? sqrt(acc) : pow(acc, 1.0 / p));
}

void check_total_finite(double total, double norm_type, size_t count) {
  MT_CHECK(std::isfinite(total), "clip_grad_norm_: the total norm of order ", norm_type, " of ", count,
           " gradients is ", total, "; nothing was clipped (error_if_nonfinite=true)");
}

// A norm's partial sums: host gradients summed here in fp64; device gradients keep theirs on their
// device (one running scalar per device), so nothing waits for the device.
struct NormParts {
  double host_acc = 0.0;
  bool any_host = false;
  std::vector<Tensor> device_parts;
};

// Meta gradients take the path of the dry run's target, so they allocate what it would; on the
// host path (meta_on_host) their scalars live on meta too, where the dry run counts them.
NormParts norm_parts(const std::vector<Tensor>& grads, double norm_type, DType norm_dtype, bool meta_on_host,
                     const Tensor& host_part) {
  const bool inf = std::isinf(norm_type);
  NormParts parts;
  for (const Tensor& g_in : grads) {
    if (!g_in.device().is_cpu() && !(meta_on_host && g_in.device().is_meta())) {
      const Tensor g = g_in.dtype() == norm_dtype ? g_in : g_in.to(norm_dtype);
      const Tensor part = inf ? max(abs(g)) : norm_type == 2.0 ? sum(square(g)) : sum(pow(abs(g), norm_type));
      auto it = std::find_if(parts.device_parts.begin(), parts.device_parts.end(),
                             [&](const Tensor& t) { return t.device() == g.device(); });
      if (it == parts.device_parts.end()) parts.device_parts.push_back(part);
      else *it = combine_parts(inf, *it, part);
      continue;
    }
    const Tensor g = g_in.is_dense() ? g_in : g_in.contiguous();  // a norm reads memory in any order
    backends::norm_part(g, g, norm_type, host_part);
    if (!meta_on_host) parts.host_acc = combine_parts(inf, parts.host_acc, host_part.item<double>());
    parts.any_host = true;
  }
  return parts;
}

// Every gradient on the host: the total is known here, and only a factor below 1 touches them.
Tensor clip_on_host(std::vector<Tensor>& grads, const NormParts& parts, double max_norm, double norm_type,
                    DType norm_dtype, bool meta_on_host, bool error_if_nonfinite) {
  const double total = finish_norm(norm_type, parts.host_acc);
  if (error_if_nonfinite) check_total_finite(total, norm_type, grads.size());
  const double coef = max_norm / (total + 1e-6);
  if (meta_on_host)
    memory::note_assumption("clip_grad_norm_: the norm of meta gradients cannot be read; assumed finite and "
                            "above max_norm (the gradients were scaled)");
  // PyTorch multiplies by min(coef, 1) always; multiplying by 1 changes nothing, so only a coef
  // below 1, or a NaN one (non-finite norm), touches the gradients.
  if (!(coef >= 1.0) || meta_on_host)
    for (Tensor& g : grads) g.mul_(coef);
  return full({}, total, TensorOptions(norm_dtype).device(meta_on_host ? Device::meta() : Device::cpu()));
}

// The total and the clip factor are computed where the first device gradient lives, and every
// gradient is multiplied by min(factor, 1) there, as PyTorch does: no value is read back.
Tensor clip_on_device(std::vector<Tensor>& grads, const NormParts& parts, double max_norm, double norm_type,
                      DType norm_dtype, bool error_if_nonfinite) {
  const bool inf = std::isinf(norm_type);
  const Device home = parts.device_parts.front().device();
  const TensorOptions on_home = TensorOptions().dtype(norm_dtype).device(home);
  Tensor acc = parts.any_host ? full({}, parts.host_acc, on_home) : parts.device_parts.front();
  for (size_t i = parts.any_host ? 0 : 1; i < parts.device_parts.size(); ++i)
    acc = combine_parts(inf, acc, parts.device_parts[i].to(home));
  const Tensor total = finish_norm(norm_type, acc);
  if (error_if_nonfinite && total.device().is_meta())
    memory::note_assumption("clip_grad_norm_: the total norm is on meta; assumed finite");
  else if (error_if_nonfinite)
    check_total_finite(total.item<double>(), norm_type, grads.size());
  // Sequenced (argument order is unspecified, and a dry run's trace follows allocation order).
  const Tensor one = full({}, 1.0, on_home);
  const Tensor coef = minimum(rdiv(add(total, 1e-6), max_norm), one);
  for (Tensor& g : grads) g.mul_(g.device() == home ? coef : coef.to(g.device()));
  return total;
}

}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  // Clipping is part of the update, between backward and the optimizer's step: a memory trace
  // labels its buffers so (docs/MEMORY.md, the timeline's phases).
  memory::PhaseScope phase(memory::Phase::Optimizer);
  MT_CHECK(norm_type > 0.0 && !std::isnan(norm_type), "clip_grad_norm_: norm_type must be > 0 or inf, got ",
           norm_type);
  MT_CHECK(!std::isnan(max_norm) && max_norm >= 0.0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  std::vector<Tensor> grads;
  DType norm_dtype = kFloat32;
  for (const Tensor& p : parameters) {
    MT_CHECK(p.defined(), "clip_grad_norm_: undefined parameter tensor");
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (g.dtype() == kFloat64) norm_dtype = kFloat64;
    grads.push_back(g);
  }
  if (grads.empty()) return zeros({}, kFloat32);
  NoGradGuard no_grad;
  const bool meta_on_host = grads.front().device().is_meta() && memory::dry_run_target().is_cpu();
  const Tensor host_part = empty({}, TensorOptions(kFloat64).device(meta_on_host ? Device::meta() : Device::cpu()));
  const NormParts parts = norm_parts(grads, norm_type, norm_dtype, meta_on_host, host_part);
  if (parts.device_parts.empty())
    return clip_on_host(grads, parts, max_norm, norm_type, norm_dtype, meta_on_host, error_if_nonfinite);
  return clip_on_device(grads, parts, max_norm, norm_type, norm_dtype, error_if_nonfinite);
}

Tensor clip_grad_norm_(const Tensor& parameter, double max_norm, double norm_type, bool error_if_nonfinite) {
  return clip_grad_norm_(std::vector<Tensor>{parameter}, max_norm, norm_type, error_if_nonfinite);
}

}  // namespace mixtrain::nn::utils
