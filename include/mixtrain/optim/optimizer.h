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

#include <nlohmann/json_fwd.hpp>

#include "mixtrain/base/arg.h"
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
  // The rates the update multiplies by (computed in double, applied in the weight's compute
  // type), named as in the message of a step that refuses them: each must be finite there.
  virtual std::vector<std::pair<std::string, double>> step_scalars() const { return {{"lr", get_lr()}}; }
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
  // The same update, decided on the device: every parameter's update reads found_inf (a float32
  // scalar on the parameters' device, 0 or 1 as amp::GradScaler writes it) and changes nothing
  // when it is nonzero. No host synchronisation: amp::GradScaler::step uses this. The step
  // counts below then read the device back when asked.
  void step(const Tensor& found_inf);
  // Throws unless every group's rates (OptimizerOptions::step_scalars) are finite in the
  // precision its update computes in (float32; float64 for float64 weights): both step()s check
  // this before any weight or state is written.
  void check_step_scalars() const;
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
  int64_t steps_taken() const;
  int64_t steps_skipped() const;
  bool last_step_skipped() const;
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
    int64_t step = 0;     // updates attempted; taken_steps() subtracts those a device flag skipped
    Tensor skipped_steps;  // int32 scalar counting device-side skips (created by step(found_inf))
    Tensor master;       // fp32 master copy (master weights on, half parameter), else undefined
    Tensor master_grad;  // fp32 buffer that unscale_ writes, shown as master.grad()
    bool master_grad_fresh = false;
    NamedTensors buffers;  // "exp_avg", "momentum_buffer", ...; dtype of the updated weight
    Tensor* find(const std::string& name);
    int64_t taken_steps() const;  // reads the skip counter back
  };

  // What one parameter's update works on. `weight` is what is updated (the master copy or the
  // parameter); `grad` is the gradient to use (fp32 master grad, or the parameter's grad, maybe
  // half); `half_out` is the half parameter to refresh from the master (undefined without one).
  // `found_inf` (may be undefined) gates the update on the device, with state.skipped_steps.
  struct UpdateTarget {
    Tensor weight;
    Tensor grad;
    Tensor half_out;
    ParamState& state;
    Tensor found_inf;
  };
  virtual void update(const OptimizerOptions& options, UpdateTarget& target) = 0;
  // The names of the state buffers this optimizer may create (for load_state_dict's checks).
  virtual std::vector<std::string> buffer_names() const = 0;
  // Buffers that exist together (a state with some but not all of one set is rejected on load).
  virtual std::vector<std::vector<std::string>> buffer_sets() const { return {}; }

 private:
  void init_group_state(size_t group_index);
  void update_all(const Tensor& found_inf);
  int64_t gated_skips() const;

  std::vector<ParamGroup> groups_;
  std::vector<std::vector<ParamState>> state_;  // parallel to groups_[g].params()
  std::unique_ptr<OptimizerOptions> defaults_;
  int64_t steps_taken_ = 0;  // host-decided steps (step(), mark_step_skipped())
  int64_t steps_skipped_ = 0;
  bool last_step_skipped_ = false;
  int64_t gated_steps_ = 0;  // step(found_inf) calls: their skips are summed on the device
  Tensor gated_skips_;       // float32 scalar
  Tensor last_found_inf_;    // the last step's flag when it was gated, else undefined
};

}  // namespace mixtrain::optim
