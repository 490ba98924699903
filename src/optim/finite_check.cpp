// Finiteness of parameters and optimizer state (finite_check.h).
#include "optim/finite_check.h"

#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include "backends/amp.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"

namespace mixtrain::optim::detail {

namespace {
bool scannable(DType d) { return d == kFloat32 || d == kFloat64 || is_half(d); }
}  // namespace

bool scan_non_finite_into(const std::vector<Tensor>& tensors, const std::vector<Tensor>& flags,
                          const std::vector<Tensor>& ones) {
  NoGradGuard no_grad;
  std::map<std::tuple<int, int, int>, std::vector<Tensor>> buckets;
  for (const Tensor& t : tensors) {
    if (!t.defined() || t.numel() == 0 || t.device().is_meta() || !scannable(t.dtype())) continue;
    buckets[{static_cast<int>(t.device().type), t.device().index, static_cast<int>(t.dtype())}].push_back(t.detach());
  }
  for (const auto& [key, list] : buckets) {
    const Device d = list.front().device();
    size_t k = 0;
    while (k < flags.size() && flags[k].device() != d) ++k;
    if (k == flags.size()) return false;
    // In place at inv_scale 1: the kernel only reads.
    backends::non_finite_check_and_unscale(d.type, list, list, ones[k], flags[k], Tensor());
  }
  return true;
}

Tensor scan_non_finite(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> flags, ones_list;
  for (const Tensor& t : tensors) {
    if (!t.defined() || t.numel() == 0 || t.device().is_meta() || !scannable(t.dtype())) continue;
    bool known = false;
    for (const Tensor& f : flags) known = known || f.device() == t.device();
    if (known) continue;
    flags.push_back(zeros({}, TensorOptions(kFloat32).device(t.device())));
    ones_list.push_back(ones({}, TensorOptions(kFloat32).device(t.device())));
  }
  scan_non_finite_into(tensors, flags, ones_list);
  Tensor total;
  for (const Tensor& f : flags) total = total.defined() ? total + f.to(total.device()) : f;
  return total;
}

std::string first_non_finite(const NamedTensorList& named, std::string* value) {
  NoGradGuard no_grad;
  for (const auto& [name, t] : named) {
    if (!t.defined() || t.device().is_meta() || !is_floating(t.dtype())) continue;
    const std::vector<double> v = t.detach().to(Device::cpu()).to(kFloat64).contiguous().to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::isfinite(v[i])) continue;
      if (value) {
        std::ostringstream os;
        os << (std::isnan(v[i]) ? "NaN" : v[i] > 0 ? "inf" : "-inf") << " at element " << i << " of " << v.size();
        *value = os.str();
      }
      return name;
    }
  }
  return {};
}

}  // namespace mixtrain::optim::detail
