// Adam and AdamW: one fused update per parameter (src/backends/cpu/optim_step.cpp); they differ only in
// how weight decay enters (L2 on the gradient vs decoupled on the weight) and its default.
#include "mixtrain/optim/adam.h"

#include <cmath>

#include "backends/optim.h"
#include "core/json_fields.h"
#include "mixtrain/base/error.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/optim/adamw.h"
#include "optim/fused_update.h"

namespace mixtrain::optim {

namespace {

template <class O>
nlohmann::json adam_to_json(const O& o) {
  return {{"lr", o.lr()},
          {"betas", {o.betas().first, o.betas().second}},
          {"eps", o.eps()},
          {"weight_decay", o.weight_decay()},
          {"amsgrad", o.amsgrad()},
          {"master_weights", o.master_weights()}};
}

template <class O>
O adam_from_json(const nlohmann::json& j, const std::string& where) {
  json_io::check_object_keys(j, {"lr", "betas", "eps", "weight_decay", "amsgrad", "master_weights"}, {}, where);
  O o;
  o.lr(json_io::json_number(j, "lr", where));
  o.betas(json_io::json_number_pair(j, "betas", where));
  o.eps(json_io::json_number(j, "eps", where));
  o.weight_decay(json_io::json_number(j, "weight_decay", where));
  o.amsgrad(json_io::json_bool(j, "amsgrad", where));
  o.master_weights(json_io::json_bool(j, "master_weights", where));
  return o;
}

template <class O>
void adam_validate(const O& o, const std::string& who) {
  MT_CHECK(std::isfinite(o.lr()) && o.lr() >= 0.0, who, ": invalid lr = ", o.lr(), " (expected a finite value >= 0)");
  MT_CHECK(std::isfinite(o.eps()) && o.eps() >= 0.0, who, ": invalid eps = ", o.eps(), " (expected >= 0)");
  MT_CHECK(o.betas().first >= 0.0 && o.betas().first < 1.0, who, ": invalid betas[0] = ", o.betas().first,
           " (expected 0 <= beta1 < 1)");
  MT_CHECK(o.betas().second >= 0.0 && o.betas().second < 1.0, who, ": invalid betas[1] = ", o.betas().second,
           " (expected 0 <= beta2 < 1)");
  MT_CHECK(std::isfinite(o.weight_decay()) && o.weight_decay() >= 0.0, who, ": invalid weight_decay = ",
           o.weight_decay(), " (expected >= 0)");
}

// The largest step size is the first step's, lr / (1 - beta1) (the bias correction grows to 1).
template <class O>
std::vector<std::pair<std::string, double>> adam_step_scalars(const O& o, bool decoupled) {
  std::vector<std::pair<std::string, double>> out = {{"lr", o.lr()},
                                                     {"lr / (1 - beta1), the first step's size",
                                                      o.lr() / (1.0 - o.betas().first)}};
  if (decoupled) out.emplace_back("1 - lr * weight_decay", 1.0 - o.lr() * o.weight_decay());
  return out;
}

template <class O>
void adam_update(const O& o, const Tensor& weight, const Tensor& grad, const Tensor& half_out, NamedTensors& buffers,
                 int64_t& step, const detail::StepGate& gate, bool decoupled) {
  auto buffer = [&](const char* name) {
    for (auto& [n, t] : buffers)
      if (n == name) return t;
    // PyTorch's initial state: zeros like the weight (fp32 for a master copy; its layout too).
    Tensor t = zeros_like(weight);
    buffers.emplace_back(name, t);
    return t;
  };
  Tensor m = buffer("exp_avg");
  Tensor v = buffer("exp_avg_sq");
  Tensor vmax = o.amsgrad() ? buffer("max_exp_avg_sq") : Tensor();
  ++step;
  detail::AdamArgs a;
  a.lr = o.lr();
  a.beta1 = o.betas().first;
  a.beta2 = o.betas().second;
  a.eps = o.eps();
  a.weight_decay = o.weight_decay();
  a.decoupled = decoupled;
  a.amsgrad = o.amsgrad();
  a.step = step;
  detail::fused_adam(weight, grad, m, v, vmax, half_out, a, gate);
}

}  // namespace

nlohmann::json AdamOptions::to_json() const { return adam_to_json(*this); }
void AdamOptions::from_json(const nlohmann::json& j, const std::string& where) {
  *this = adam_from_json<AdamOptions>(j, where);
}
void AdamOptions::validate(const std::string& who) const { adam_validate(*this, who); }
std::vector<std::pair<std::string, double>> AdamOptions::step_scalars() const {
  return adam_step_scalars(*this, false);
}

nlohmann::json AdamWOptions::to_json() const { return adam_to_json(*this); }
void AdamWOptions::from_json(const nlohmann::json& j, const std::string& where) {
  *this = adam_from_json<AdamWOptions>(j, where);
}
void AdamWOptions::validate(const std::string& who) const { adam_validate(*this, who); }
std::vector<std::pair<std::string, double>> AdamWOptions::step_scalars() const {
  return adam_step_scalars(*this, true);
}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults)
    : Optimizer(std::move(groups), std::make_unique<AdamOptions>(defaults)) {
  init_groups();
}
Adam::Adam(std::vector<Tensor> params, const AdamOptions& defaults)
    : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}

void Adam::update(const OptimizerOptions& options, UpdateTarget& t) {
  adam_update(static_cast<const AdamOptions&>(options), t.weight, t.grad, t.half_out, t.state.buffers, t.state.step,
              {t.found_inf, t.state.skipped_steps}, /*decoupled=*/false);
}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& defaults)
    : Optimizer(std::move(groups), std::make_unique<AdamWOptions>(defaults)) {
  init_groups();
}
AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& defaults)
    : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}

void AdamW::update(const OptimizerOptions& options, UpdateTarget& t) {
  adam_update(static_cast<const AdamWOptions&>(options), t.weight, t.grad, t.half_out, t.state.buffers, t.state.step,
              {t.found_inf, t.state.skipped_steps}, /*decoupled=*/true);
}

}  // namespace mixtrain::optim
