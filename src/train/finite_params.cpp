// The parameters' finiteness after an optimizer step (finite_params.h).
#include "train/finite_params.h"

#include <string>
#include <utility>
#include <vector>

#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "optim/finite_check.h"

namespace mixtrain::train {

FiniteParams::FiniteParams(const nn::Module& model) : model_(model) {
  for (const Tensor& p : model.parameters()) {
    if (p.device().is_meta()) continue;
    bool known = false;
    for (const Tensor& f : flags_) known = known || f.device() == p.device();
    if (known) continue;
    flags_.push_back(zeros({}, TensorOptions(kFloat32).device(p.device())));
    ones_.push_back(ones({}, TensorOptions(kFloat32).device(p.device())));
  }
}

void FiniteParams::scan() {
  NoGradGuard no_grad;
  for (Tensor& f : flags_) f.zero_();
  MT_CHECK(optim::detail::scan_non_finite_into(model_.parameters(), flags_, ones_), "FiniteParams: a parameter ",
           "moved to a device it was not on when training started");
}

bool FiniteParams::all_finite() const {
  for (const Tensor& f : flags_)
    if (f.item<float>() != 0.0f) return false;
  return true;
}

void FiniteParams::refuse(int64_t step) const {
  optim::detail::NamedTensorList named;
  for (const auto& [name, p] : model_.named_parameters()) named.emplace_back(name, p);
  std::string value;
  const std::string name = optim::detail::first_non_finite(named, &value);
  MT_ERROR("step ", step, ": the optimizer step left parameter \"", name, "\" non-finite (", value,
           "); stopping before training on or saving non-finite weights (lower the learning rate, clip gradients ",
           "or check the data)");
}

}  // namespace mixtrain::train
