#pragma once
// SGD with momentum, dampening, weight decay and Nesterov momentum: PyTorch's torch.optim.SGD.
//   g = grad + weight_decay * w
//   buf = g on the first step, else momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf          (when momentum != 0)
//   w = w - lr * g
#include "mixtrain/optim/optimizer.h"

namespace mixtrain::optim {

class SGDOptions : public OptimizerOptions {
 public:
  explicit SGDOptions(double lr = 1e-3) : lr_(lr) {}
  MT_ARG(double, lr);
  MT_ARG(double, momentum) = 0.0;
  MT_ARG(double, dampening) = 0.0;
  MT_ARG(double, weight_decay) = 0.0;
  MT_ARG(bool, nesterov) = false;
  MT_ARG(bool, master_weights) = false;

 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<SGDOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  bool has_momentum() const override { return true; }
  double get_momentum() const override { return momentum_; }
  void set_momentum(double m) override { momentum_ = m; }
  bool get_master_weights() const override { return master_weights_; }
  nlohmann::json to_json() const override;
  void from_json(const nlohmann::json& j, const std::string& where) override;
  void validate(const std::string& who) const override;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults = SGDOptions());
  SGD(std::vector<Tensor> params, const SGDOptions& defaults = SGDOptions());
  const char* name() const override { return "SGD"; }

 protected:
  void update(const OptimizerOptions& options, UpdateTarget& target) override;
  std::vector<std::string> buffer_names() const override { return {"momentum_buffer"}; }
};

}  // namespace mixtrain::optim
