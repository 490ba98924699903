#include "mixtrain/optim/optimizer.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <typeinfo>
#include <unordered_set>

#include "core/json_fields.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/memory/trace.h"

namespace mixtrain::optim {

using json_io::json_path;

// ---- ParamGroup -------------------------------------------------------------------------------

ParamGroup::ParamGroup(std::vector<Tensor> params) : params_(std::move(params)) {}
ParamGroup::ParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options)
    : params_(std::move(params)), options_(std::move(options)) {}
ParamGroup::ParamGroup(const ParamGroup& other)
    : params_(other.params_), options_(other.options_ ? other.options_->clone() : nullptr) {}
ParamGroup& ParamGroup::operator=(const ParamGroup& other) {
  if (this != &other) {
    params_ = other.params_;
    options_ = other.options_ ? other.options_->clone() : nullptr;
  }
  return *this;
}
OptimizerOptions& ParamGroup::options() {
  MT_CHECK(options_ != nullptr, "ParamGroup: the group has no options yet (it gets the optimizer's defaults ",
           "when added to an optimizer)");
  return *options_;
}
const OptimizerOptions& ParamGroup::options() const { return const_cast<ParamGroup*>(this)->options(); }

// ---- Optimizer --------------------------------------------------------------------------------

Tensor* Optimizer::ParamState::find(const std::string& name) {
  for (auto& [n, t] : buffers)
    if (n == name) return &t;
  return nullptr;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults)
    : groups_(std::move(groups)), defaults_(std::move(defaults)) {
  // The groups are checked and given state by the derived constructor (init_groups), where
  // name() already reports the derived class.
}

Optimizer::~Optimizer() = default;

void Optimizer::add_param_group(ParamGroup group) {
  const std::string who = std::string(name()) + ".add_param_group";
  if (!group.has_options()) {
    group.set_options(defaults_->clone());
  } else {
    const OptimizerOptions& o = group.options();
    const OptimizerOptions& d = *defaults_;
    MT_CHECK(typeid(o) == typeid(d), who, ": the group's options are of another optimizer's type (",
             name(), " needs ", name(), "Options)");
  }
  group.options().validate(name());
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& g : groups_)
    for (const auto& p : g.params()) seen.insert(p.impl().get());
  for (size_t i = 0; i < group.params().size(); ++i) {
    const Tensor& p = group.params()[i];
    MT_CHECK(p.defined(), who, ": parameter ", i, " of the group is an undefined tensor");
    MT_CHECK(is_floating(p.dtype()), who, ": parameter ", i, " is ", p.summary(),
             "; an optimizer can only update floating tensors");
    MT_CHECK(p.is_leaf(), who, ": parameter ", i, " (", p.summary(), ") is not a leaf tensor; optimize leaves ",
             "(model parameters), not results of ops");
    MT_CHECK(seen.insert(p.impl().get()).second, who, ": parameter ", i, " (", p.summary(),
             ") appears more than once (in this group or in another group)");
  }
  groups_.push_back(std::move(group));
  init_group_state(groups_.size() - 1);
}

void Optimizer::init_groups() {
  std::vector<ParamGroup> groups = std::move(groups_);
  groups_.clear();
  state_.clear();
  defaults_->validate(name());
  size_t total = 0;
  for (auto& g : groups) {
    total += g.params().size();
    add_param_group(std::move(g));
  }
  MT_CHECK(total > 0, name(), ": the optimizer got an empty parameter list");
}

void Optimizer::init_group_state(size_t group_index) {
  NoGradGuard no_grad;
  const ParamGroup& g = groups_[group_index];
  std::vector<ParamState> states(g.params().size());
  if (g.options().get_master_weights()) {
    for (size_t i = 0; i < states.size(); ++i) {
      const Tensor& p = g.params()[i];
      if (is_half(p.dtype())) {
        states[i].master = p.detach().to(kFloat32);  // exact: fp32 holds every half
        memory::tag_role(states[i].master.impl()->storage.get(), p.device(), memory::Role::MasterWeight);
      }
    }
  }
  state_.push_back(std::move(states));
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const auto& g : groups_) out.insert(out.end(), g.params().begin(), g.params().end());
  return out;
}

std::vector<Tensor> Optimizer::master_params() const {
  std::vector<Tensor> out;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params().size(); ++i)
      out.push_back(state_[g][i].master.defined() ? state_[g][i].master : groups_[g].params()[i]);
  return out;
}

bool Optimizer::has_master_weights() const {
  for (const auto& gs : state_)
    for (const auto& s : gs)
      if (s.master.defined()) return true;
  return false;
}

int64_t Optimizer::ParamState::taken_steps() const {
  return step - (skipped_steps.defined() ? static_cast<int64_t>(skipped_steps.item<int32_t>()) : 0);
}

void Optimizer::mark_step_skipped() {
  last_step_skipped_ = true;
  last_found_inf_ = Tensor();
  ++steps_skipped_;
}

int64_t Optimizer::gated_skips() const {
  if (gated_skips_.defined() && gated_skips_.device().is_meta()) {
    memory::note_assumption("Optimizer: the skipped-step count is on meta; assumed 0 (every step taken)");
    return 0;
  }
  return gated_skips_.defined() ? static_cast<int64_t>(gated_skips_.item<float>()) : 0;
}
int64_t Optimizer::steps_taken() const { return steps_taken_ + gated_steps_ - gated_skips(); }
int64_t Optimizer::steps_skipped() const { return steps_skipped_ + gated_skips(); }
bool Optimizer::last_step_skipped() const {
  if (last_found_inf_.defined() && last_found_inf_.device().is_meta()) {
    memory::note_assumption("Optimizer: found_inf is on meta; the last step is assumed taken");
    return false;
  }
  return last_found_inf_.defined() ? last_found_inf_.item<float>() != 0.0f : last_step_skipped_;
}

void Optimizer::zero_grad() {
  memory::PhaseScope phase(memory::Phase::Optimizer);
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params().size(); ++i) {
      groups_[g].params()[i].set_grad(Tensor());
      ParamState& s = state_[g][i];
      if (s.master.defined()) s.master.set_grad(Tensor());
      s.master_grad_fresh = false;  // the fp32 buffer is kept for the next unscale
    }
  }
}

std::vector<Optimizer::UnscaleTarget> Optimizer::unscale_targets() {
  std::vector<UnscaleTarget> out;
  int64_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params().size(); ++i, ++index) {
      Tensor& p = groups_[g].params()[i];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      ParamState& s = state_[g][i];
      if (s.master.defined()) {
        if (!s.master_grad.defined()) {
          s.master_grad = Tensor::empty(p.shape(), TensorOptions(kFloat32).device(p.device()), p.suggest_memory_format());
          memory::tag_role(s.master_grad.impl()->storage.get(), p.device(), memory::Role::Gradient);
        }
        s.master.set_grad(s.master_grad);
        s.master_grad_fresh = true;
        out.push_back({grad, s.master_grad, p, index});
      } else {
        out.push_back({grad, grad, p, index});
      }
    }
  }
  return out;
}

void Optimizer::check_step_scalars() const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    bool single = false;  // some weight of the group updates in float32 (all but float64 ones)
    for (size_t i = 0; i < groups_[g].params().size(); ++i) {
      const Tensor& w = state_[g][i].master.defined() ? state_[g][i].master : groups_[g].params()[i];
      single = single || (groups_[g].params()[i].grad().defined() && w.dtype() != kFloat64);
    }
    for (const auto& [what, v] : groups_[g].options().step_scalars()) {
      const bool ok = std::isfinite(v) && (!single || std::fabs(v) <= std::numeric_limits<float>::max());
      MT_CHECK(ok, name(), ".step: ", what, " of parameter group ", g, " is ", v, ", not a finite ",
               single ? "float32 value (the update computes in float32)" : "number",
               "; refusing the step before any weight or state is written (lower the learning rate)");
    }
  }
}

void Optimizer::update_all(const Tensor& found_inf) {
  check_step_scalars();
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const OptimizerOptions& options = groups_[g].options();
    for (size_t i = 0; i < groups_[g].params().size(); ++i) {
      Tensor& p = groups_[g].params()[i];
      if (!p.grad().defined()) continue;
      ParamState& s = state_[g][i];
      if (found_inf.defined() && !s.skipped_steps.defined())
        s.skipped_steps = zeros({}, TensorOptions(kInt32).device(p.device()));
      if (s.master.defined()) {
        UpdateTarget t{s.master, s.master_grad_fresh ? s.master_grad : p.grad(), p, s, found_inf};
        update(options, t);
        s.master_grad_fresh = false;
        s.master.bump_version();
      } else {
        UpdateTarget t{p, p.grad(), Tensor(), s, found_inf};
        update(options, t);
      }
      p.bump_version();  // written in place: autograd's saved-tensor checks must see it
    }
  }
}

void Optimizer::step() {
  memory::PhaseScope phase(memory::Phase::Optimizer);
  update_all(Tensor());
  last_step_skipped_ = false;
  last_found_inf_ = Tensor();
  ++steps_taken_;
}

void Optimizer::step(const Tensor& found_inf) {
  MT_CHECK(found_inf.defined() && found_inf.dtype() == kFloat32 && found_inf.numel() == 1, name(),
           ".step: found_inf must be a float32 scalar (0: take the step, 1: skip it), got ",
           found_inf.defined() ? found_inf.summary() : std::string("an undefined tensor"));
  memory::PhaseScope phase(memory::Phase::Optimizer);
  if (found_inf.device().is_meta())
    memory::note_assumption("Optimizer.step(found_inf): found_inf is on meta; the step is assumed taken (finite "
                            "gradients)");
  update_all(found_inf);
  NoGradGuard no_grad;
  const Tensor flag = found_inf.detach().reshape({});
  gated_skips_ = gated_skips_.defined() ? gated_skips_ + flag.to(gated_skips_.device()) : flag.clone();
  last_found_inf_ = flag;
  ++gated_steps_;
}

}  // namespace mixtrain::optim
