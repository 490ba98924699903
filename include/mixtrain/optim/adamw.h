#pragma once
// AdamW (torch.optim.AdamW): Adam with decoupled weight decay, applied to the weight before the
// Adam step: w = w * (1 - lr * weight_decay). Default weight_decay 0.01, as in PyTorch.
#include "mixtrain/optim/adam.h"

namespace mixtrain::optim {

class AdamWOptions : public OptimizerOptions {
 public:
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}
  MT_ARG(double, lr);
  MT_ARG(Betas, betas) = std::make_pair(0.9, 0.999);
  MT_ARG(double, eps) = 1e-8;
  MT_ARG(double, weight_decay) = 1e-2;
  MT_ARG(bool, amsgrad) = false;
  MT_ARG(bool, master_weights) = false;

 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<AdamWOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  bool has_momentum() const override { return true; }
  double get_momentum() const override { return betas_.first; }
  void set_momentum(double m) override { betas_.first = m; }
  bool get_master_weights() const override { return master_weights_; }
  nlohmann::json to_json() const override;
  void from_json(const nlohmann::json& j, const std::string& where) override;
  void validate(const std::string& who) const override;
  std::vector<std::pair<std::string, double>> step_scalars() const override;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& defaults = AdamWOptions());
  AdamW(std::vector<Tensor> params, const AdamWOptions& defaults = AdamWOptions());
  const char* name() const override { return "AdamW"; }

 protected:
  void update(const OptimizerOptions& options, UpdateTarget& target) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; }
  std::vector<std::vector<std::string>> buffer_sets() const override { return {{"exp_avg", "exp_avg_sq"}}; }
};

}  // namespace mixtrain::optim
