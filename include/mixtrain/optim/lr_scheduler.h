#pragma once
// Learning-rate schedulers with PyTorch's formulas, evaluated in closed form from the count of
// scheduler steps (so a resumed run recomputes exactly the same rates).
//
// Skipped steps. With a GradScaler some optimizer steps are skipped (inf/NaN gradients). PyTorch
// advances the schedule anyway; here a skipped step does not advance it unless asked:
//   scheduler.step();                       // advances unless optimizer.last_step_skipped()
//   scheduler.step(scaler.step(opt));       // advances iff the optimizer stepped
//   scheduler.step(true);                   // advances regardless (PyTorch's behaviour)
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mixtrain/base/arg.h"
#include "mixtrain/optim/optimizer.h"

namespace mixtrain::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  void step();
  void step(bool optimizer_stepped);

  // Number of times the schedule has advanced (PyTorch's last_epoch; 0 after construction).
  int64_t last_epoch() const { return last_epoch_; }
  // The rates last written into the groups, one per group.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // {"type", "last_epoch", "base_lrs", "_last_lr"} and the scheduler's settings (e.g. "gamma"),
  // which load_state_dict checks against its own: a state of another schedule is an Error.
  nlohmann::json state_dict() const;
  // Throws mixtrain::Error naming the field when `state` is not a state of this scheduler (other
  // type or settings, a bad or missing field); changes nothing.
  void validate_state_dict(const nlohmann::json& state) const;
  // Validates, then restores last_epoch (and the base rates) and writes the rates of that epoch
  // into the groups.
  void load_state_dict(const nlohmann::json& state);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Called at the end of a derived constructor: records base rates, applies epoch 0.
  void initialize();
  // The rates of every group at `epoch`; also writes momentum when the schedule cycles it.
  virtual std::vector<double> lrs_at(int64_t epoch) = 0;
  virtual const char* name() const = 0;
  // The last epoch the schedule is defined for (OneCycleLR: total_steps).
  virtual int64_t max_epoch() const;
  // The settings that decide the schedule, saved in state_dict() (an object; none by default).
  virtual nlohmann::json settings() const;

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;

 private:
  void apply(int64_t epoch);

  friend class SequentialLR;  // drives its schedulers' lrs_at with its own base rates

  int64_t last_epoch_ = 0;
  std::vector<double> last_lr_;
};

// eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);

 protected:
  std::vector<double> lrs_at(int64_t epoch) override;
  const char* name() const override { return "CosineAnnealingLR"; }
  nlohmann::json settings() const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

enum class AnnealStrategy { Cos, Linear };

class OneCycleLROptions {
 public:
  OneCycleLROptions(double max_lr, int64_t total_steps) : max_lr_(max_lr), total_steps_(total_steps) {}
  MT_ARG(double, max_lr);
  MT_ARG(int64_t, total_steps);
  MT_ARG(double, pct_start) = 0.3;
  MT_ARG(AnnealStrategy, anneal_strategy) = AnnealStrategy::Cos;
  MT_ARG(bool, cycle_momentum) = true;
  MT_ARG(double, base_momentum) = 0.85;
  MT_ARG(double, max_momentum) = 0.95;
  MT_ARG(double, div_factor) = 25.0;
  MT_ARG(double, final_div_factor) = 1e4;
  MT_ARG(bool, three_phase) = false;
};

// PyTorch's OneCycleLR: from max_lr / div_factor up to max_lr over pct_start of the steps, then
// down to initial_lr / final_div_factor (three_phase: back to initial_lr first); momentum (SGD's
// momentum, Adam's beta1) moves the opposite way between max_momentum and base_momentum.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options);

 protected:
  std::vector<double> lrs_at(int64_t epoch) override;
  const char* name() const override { return "OneCycleLR"; }
  int64_t max_epoch() const override { return options_.total_steps(); }
  nlohmann::json settings() const override;

 private:
  struct Phase {
    double end_step;
    double start_lr, end_lr;
    double start_momentum, end_momentum;
  };
  double anneal(double start, double end, double pct) const;

  OneCycleLROptions options_;
  std::vector<Phase> phases_;
};

}  // namespace mixtrain::optim
