#include "mixtrain/optim/sgd.h"

#include <cmath>

#include "core/json_fields.h"
#include "mixtrain/base/error.h"
#include "mixtrain/core/factories.h"
#include "optim/fused_update.h"

namespace mixtrain::optim {

nlohmann::json SGDOptions::to_json() const {
  return {{"lr", lr_},
          {"momentum", momentum_},
          {"dampening", dampening_},
          {"weight_decay", weight_decay_},
          {"nesterov", nesterov_},
          {"master_weights", master_weights_}};
}

void SGDOptions::from_json(const nlohmann::json& j, const std::string& where) {
  json_io::check_object_keys(j, {"lr", "momentum", "dampening", "weight_decay", "nesterov", "master_weights"}, {}, where);
  SGDOptions o;
  o.lr_ = json_io::json_number(j, "lr", where);
  o.momentum_ = json_io::json_number(j, "momentum", where);
  o.dampening_ = json_io::json_number(j, "dampening", where);
  o.weight_decay_ = json_io::json_number(j, "weight_decay", where);
  o.nesterov_ = json_io::json_bool(j, "nesterov", where);
  o.master_weights_ = json_io::json_bool(j, "master_weights", where);
  *this = o;
}

void SGDOptions::validate(const std::string& who) const {
  MT_CHECK(std::isfinite(lr_) && lr_ >= 0.0, who, ": invalid lr = ", lr_, " (expected a finite value >= 0)");
  MT_CHECK(std::isfinite(momentum_) && momentum_ >= 0.0, who, ": invalid momentum = ", momentum_, " (expected >= 0)");
  MT_CHECK(std::isfinite(dampening_), who, ": invalid dampening = ", dampening_, " (expected a finite value)");
  MT_CHECK(std::isfinite(weight_decay_) && weight_decay_ >= 0.0, who, ": invalid weight_decay = ", weight_decay_,
           " (expected >= 0)");
  MT_CHECK(!nesterov_ || (momentum_ > 0.0 && dampening_ == 0.0), who,
           ": Nesterov momentum requires a momentum and zero dampening (momentum = ", momentum_,
           ", dampening = ", dampening_, ")");
}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults)
    : Optimizer(std::move(groups), std::make_unique<SGDOptions>(defaults)) {
  init_groups();
}

SGD::SGD(std::vector<Tensor> params, const SGDOptions& defaults)
    : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}

void SGD::update(const OptimizerOptions& options, UpdateTarget& t) {
  const auto& o = static_cast<const SGDOptions&>(options);
  detail::SgdArgs a;
  a.lr = o.lr();
  a.momentum = o.momentum();
  a.dampening = o.dampening();
  a.weight_decay = o.weight_decay();
  a.nesterov = o.nesterov();
  Tensor buf;
  if (o.momentum() != 0.0) {
    // PyTorch creates the buffer on the first step with momentum, as a copy of the gradient.
    Tensor* existing = t.state.find("momentum_buffer");
    if (existing) {
      buf = *existing;
    } else {
      // Zeros, not empty: a gated first step that the device skips leaves the buffer as it is.
      // Known gap: when momentum is switched on mid-training and that very step is skipped on
      // the device, the next taken step runs the buffer update on zeros, buf = (1 - dampening)
      // * g instead of PyTorch's buf = g; the two agree unless dampening != 0.
      buf = zeros_like(t.weight);
      t.state.buffers.emplace_back("momentum_buffer", buf);
      a.first_step = true;
    }
  }
  a.step = ++t.state.step;
  detail::fused_sgd(t.weight, t.grad, buf, t.half_out, a, {t.found_inf, t.state.skipped_steps});
}

}  // namespace mixtrain::optim
