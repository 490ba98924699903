#pragma once
// optim::Optimizer: the base of SGD, Adam and AdamW. It owns parameter groups (each with its own
// options: lr, ...), per-parameter state (step count, moment buffers) and, with the
// `master_weights` option, an fp32 master copy of every fp16/bf16 parameter.
//
// Master weights. With master_weights(true) a half parameter gets an fp32 master copy and fp32
// state; step() updates the master in fp32 and refreshes the half parameter from it (round to
// nearest even), so updates smaller than half an fp16 ulp accumulate instead of being rounded
// away. The gradient is read from the half parameter's grad, or from the fp32 master grad when
// amp::GradScaler::unscale_ has just written it (the scaler never unscales into fp16, where small
// gradients would flush to zero). After unscale_, clip master_params(): their grads are the
// unscaled fp32 ones.
//
// Checkpoints: state_dict() gives hyper-parameters and step counts as JSON (PyTorch's layout:
// "param_groups" with "params" indices, "state" by parameter index); state_tensors() gives the
// tensors ("state.<index>.exp_avg", "state.<index>.master_param", ...) for a safetensors file.
// load_state_dict() takes both back, checks everything first and changes nothing on error.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "mixtrain/core/arg.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Hyper-parameters of one parameter group. Concrete types: SGDOptions, AdamOptions, AdamWOptions.
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;

  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
  // The coefficient OneCycleLR cycles: SGD's momentum, Adam's beta1.
  virtual bool has_momentum() const { return false; }
  virtual double get_momentum() const { return 0.0; }
  virtual void set_momentum(double) {}
  virtual bool get_master_weights() const = 0;

  // Hyper-parameters with PyTorch's keys ("lr", "betas", "weight_decay", ...) and "master_weights".
  virtual nlohmann::json to_json() const = 0;
  // Reads every key of to_json() from j (all required, unknown keys rejected); throws Error
  // naming `where` and the field. Callers parse into a clone, so a failure changes nothing.
  virtual void from_json(const nlohmann::json& j, const std::string& where) = 0;
  // Throws Error naming `who` and the field when a value is out of range.
  virtual void validate(const std::string& who) const = 0;
};

// A list of parameters and, optionally, options of its own (else the optimizer's defaults).
class ParamGroup {
 public:
  ParamGroup(std::vector<Tensor> params);  // NOLINT: a plain list is a group with default options
  ParamGroup(std::vector<Tensor> params, std::unique_ptr<OptimizerOptions> options);
  template <class Options, class = std::enable_if_t<std::is_base_of_v<OptimizerOptions, Options>>>
  ParamGroup(std::vector<Tensor> params, const Options& options)
      : ParamGroup(std::move(params), std::make_unique<Options>(options)) {}
  ParamGroup(const ParamGroup& other);
  ParamGroup& operator=(const ParamGroup& other);
  ParamGroup(ParamGroup&&) = default;
  ParamGroup& operator=(ParamGroup&&) = default;

  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& params() const { return params_; }
  bool has_options() const { return options_ != nullptr; }
  OptimizerOptions& options();
  const OptimizerOptions& options() const;
  void set_options(std::unique_ptr<OptimizerOptions> options) { options_ = std::move(options); }

 private:
  std::vector<Tensor> params_;
  std::unique_ptr<OptimizerOptions> options_;
};

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // The class name as in PyTorch: "SGD", "Adam", "AdamW".
  virtual const char* name() const = 0;

  // One update of every parameter that has a gradient (parameters without one are skipped).
  void step();
  // Sets every gradient to undefined (PyTorch's set_to_none=True), master grads included.
  void zero_grad();

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  void add_param_group(ParamGroup group);
  const OptimizerOptions& defaults() const { return *defaults_; }

  // All parameters, group by group; the index of a parameter here is its index in state_dict().
  std::vector<Tensor> parameters() const;
  // Per parameter, its fp32 master copy when it has one, else the parameter itself. Clip these
  // after GradScaler::unscale_ when master weights are on.
  std::vector<Tensor> master_params() const;
  bool has_master_weights() const;

  // Step bookkeeping that schedulers read. A step skipped by GradScaler (inf/NaN gradients) is
  // recorded with mark_step_skipped(); step() clears the flag.
  int64_t steps_taken() const { return steps_taken_; }
  int64_t steps_skipped() const { return steps_skipped_; }
  bool last_step_skipped() const { return last_step_skipped_; }
  void mark_step_skipped();

  nlohmann::json state_dict() const;
  NamedTensors state_tensors() const;
  void load_state_dict(const nlohmann::json& state, const NamedTensors& tensors = {});
  // The checks of load_state_dict without applying anything; throws Error naming the field.
  void validate_state_dict(const nlohmann::json& state, const NamedTensors& tensors) const;

  // For amp::GradScaler: per parameter with a gradient, the (scaled) gradient to read and the
  // tensor that receives gradient * inv_scale: the gradient itself (in place) or, for a half
  // parameter with a master copy, the fp32 master grad, which step() then reads.
  struct UnscaleTarget {
    Tensor grad;
    Tensor out;
    Tensor param;
    int64_t index;  // in parameters()
  };
  std::vector<UnscaleTarget> unscale_targets();

 protected:
  // Derived constructors call init_groups() in their body, where name() is already theirs: it
  // validates the options and parameters and creates master copies.
  Optimizer(std::vector<ParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults);
  void init_groups();

  struct ParamState {
    int64_t step = 0;
    Tensor master;       // fp32 master copy (master weights on, half parameter), else undefined
    Tensor master_grad;  // fp32 buffer that unscale_ writes, shown as master.grad()
    bool master_grad_fresh = false;
    NamedTensors buffers;  // "exp_avg", "momentum_buffer", ...; dtype of the updated weight
    Tensor* find(const std::string& name);
  };

  // What one parameter's update works on. `weight` is what is updated (the master copy or the
  // parameter); `grad` is the gradient to use (fp32 master grad, or the parameter's grad, maybe
  // half); `half_out` is the half parameter to refresh from the master (undefined without one).
  struct UpdateTarget {
    Tensor weight;
    Tensor grad;
    Tensor half_out;
    ParamState& state;
  };
  virtual void update(const OptimizerOptions& options, UpdateTarget& target) = 0;
  // The names of the state buffers this optimizer may create (for load_state_dict's checks).
  virtual std::vector<std::string> buffer_names() const = 0;

 private:
  void init_group_state(size_t group_index);

  std::vector<ParamGroup> groups_;
  std::vector<std::vector<ParamState>> state_;  // parallel to groups_[g].params()
  std::unique_ptr<OptimizerOptions> defaults_;
  int64_t steps_taken_ = 0;
  int64_t steps_skipped_ = 0;
  bool last_step_skipped_ = false;
};

}  // namespace mixtrain::optim
