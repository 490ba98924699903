#pragma once
// AdamW (torch.optim.AdamW): Adam with decoupled weight decay, applied to the weight before the
// Adam step: w = w * (1 - lr * weight_decay). Default weight_decay 0.01, as in PyTorch.
#include "mixtrain/optim/adam.h"

namespace mixtrain::optim {

class AdamWOptions : public detail::AdamFamilyOptions<AdamWOptions> {
 public:
  explicit AdamWOptions(double lr = 1e-3) : AdamFamilyOptions(lr, /*weight_decay=*/1e-2) {}
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
