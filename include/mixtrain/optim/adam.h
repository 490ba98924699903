#pragma once
// Adam (torch.optim.Adam): L2 weight decay added to the gradient, optional AMSGrad.
//   g = grad + weight_decay * w
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g;  (vmax = max(vmax, v))
//   w = w - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Each parameter is updated in one fused pass (compute in fp32, or fp64 for fp64 parameters,
// state rounded once when stored), as PyTorch's fused=True implementation does.
#include <utility>

#include "mixtrain/optim/optimizer.h"

namespace mixtrain::optim {

using Betas = std::pair<double, double>;

namespace detail {
// Adam's and AdamW's options, declared once: they differ only in weight_decay's default and in
// how the optimizer applies it. Self is the option type deriving from it, which every setter
// returns (AdamWOptions().lr(1e-3).weight_decay(0.1) is an AdamWOptions&).
template <class Self>
class AdamFamilyOptions : public OptimizerOptions {
 protected:
  AdamFamilyOptions(double lr, double weight_decay) : lr_(lr), weight_decay_(weight_decay) {}

  MT_ARG_FOR(Self, double, lr);
  MT_ARG_FOR(Self, Betas, betas) = std::make_pair(0.9, 0.999);
  MT_ARG_FOR(Self, double, eps) = 1e-8;
  MT_ARG_FOR(Self, double, weight_decay);
  MT_ARG_FOR(Self, bool, amsgrad) = false;
  MT_ARG_FOR(Self, bool, master_weights) = false;

 public:
  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<Self>(static_cast<const Self&>(*this));
  }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  bool has_momentum() const override { return true; }
  double get_momentum() const override { return betas_.first; }
  void set_momentum(double m) override { betas_.first = m; }
  bool get_master_weights() const override { return master_weights_; }
};
}  // namespace detail

class AdamOptions : public detail::AdamFamilyOptions<AdamOptions> {
 public:
  explicit AdamOptions(double lr = 1e-3) : AdamFamilyOptions(lr, /*weight_decay=*/0.0) {}
  nlohmann::json to_json() const override;
  void from_json(const nlohmann::json& j, const std::string& where) override;
  void validate(const std::string& who) const override;
  std::vector<std::pair<std::string, double>> step_scalars() const override;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults = AdamOptions());
  Adam(std::vector<Tensor> params, const AdamOptions& defaults = AdamOptions());
  const char* name() const override { return "Adam"; }

 protected:
  void update(const OptimizerOptions& options, UpdateTarget& target) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; }
  std::vector<std::vector<std::string>> buffer_sets() const override { return {{"exp_avg", "exp_avg_sq"}}; }
};

}  // namespace mixtrain::optim
