#pragma once
// amp::GradScaler: dynamic loss scaling with PyTorch's semantics (torch.amp.GradScaler), plus
// opt-in extensions (hysteresis, min/max scale, gradient health statistics). docs/GRAD_SCALER.md
// has the full description; in short:
//
//   scaler.scale(loss).backward();   // loss * scale, in fp32
//   scaler.unscale_(opt);            // optional (before clipping): grads *= 1/scale, inf/NaN check
//   scaler.step(opt);                // unscale_ if not done; opt.step() only if all grads finite
//   scaler.update();                 // back off on overflow, grow after growth_interval clean steps
//
// The scale and trackers live in 0-dim device tensors and the check+unscale pass and the update
// are single backend calls (backends::non_finite_check_and_unscale / update_scale). When
// the gradients sit on one device, step() hands the inf/NaN flag to the optimizer's kernels
// (optim::Optimizer::step(found_inf)), which skip the update there: no value is read back unless
// the caller asks (StepOutcome, skipped_steps(), get_scale(), track_stats, min_scale).
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mixtrain/base/arg.h"
#include "mixtrain/core/tensor.h"
#include "mixtrain/optim/optimizer.h"

namespace mixtrain::amp {

// The lowest scale any GradScaler takes: 2^-126, float32's smallest normal value. Below about
// 2.9e-39 the inverse 1/scale overflows float32 and unscaling turns every gradient into inf/NaN;
// between that and 2^-126 the scale is subnormal (flushed to 0 under flush-to-zero arithmetic).
// 2^-126 has an exact, finite inverse (2^126), and powers-of-two backoffs from a power-of-two
// scale land on it exactly. docs/GRAD_SCALER.md, "The scale floor".
constexpr double kScaleFloor = 1.1754943508222875e-38;

class GradScalerOptions {
  // PyTorch's options and defaults.
  MT_ARG(double, init_scale) = 65536.0;
  MT_ARG(double, growth_factor) = 2.0;
  MT_ARG(double, backoff_factor) = 0.5;
  MT_ARG(int64_t, growth_interval) = 2000;
  MT_ARG(bool, enabled) = true;
  // Beyond PyTorch, each off by default.
  // Overflowing steps tolerated in a row before backing off (1: back off at once, as PyTorch).
  MT_ARG(int64_t, hysteresis) = 1;
  // Floor of the scale; values below kScaleFloor (0 included) mean kScaleFloor, the default. An
  // overflow with the scale already at a floor set above kScaleFloor, or with error_at_min_scale,
  // is reported: an Error from update() when error_at_min_scale, else a warning on stderr.
  MT_ARG(double, min_scale) = kScaleFloor;
  MT_ARG(bool, error_at_min_scale) = false;
  // Ceiling of the scale (inf: none).
  MT_ARG(double, max_scale) = std::numeric_limits<double>::infinity();
  // Gradient health statistics gathered in the unscale pass (read back in update()).
  MT_ARG(bool, track_stats) = false;
  // check_loss: inf/NaN losses tolerated in a row (each a skipped step) before the run is ended.
  // A skipped step leaves the weights as they were, so 10 in a row are 10 batches on which the
  // same weights' forward overflows: no bad batch or two, which PyTorch users see skipped as
  // normal, does that; and lowering the scale cannot help (it multiplies only the backward).
  MT_ARG(int64_t, nonfinite_loss_limit) = 10;
};

// Per iteration (between two update() calls), when track_stats is on.
struct GradScalerStats {
  int64_t iteration = 0;        // update() calls so far
  bool found_inf = false;       // some gradient was inf/NaN this iteration
  int64_t skipped_steps = 0;    // optimizer steps skipped so far (all iterations)
  double scale = 0.0;           // the scale the gradients were computed with
  double next_scale = 0.0;      // the scale after update()
  double max_abs_scaled_grad = 0.0;  // largest finite |g| before unscaling: headroom is 65504 / it in fp16
  double zero_fraction = 0.0;        // gradient elements exactly zero (flushed or truly zero)
  double fp16_subnormal_fraction = 0.0;  // elements with 0 < |g| < 2^-14: subnormal in fp16
  int64_t num_elements = 0;
};

// What GradScaler::step did: converts to true when the optimizer step was taken. The decision is
// usually made on the device, so asking waits for it; a loop that never asks never synchronises.
class StepOutcome {
 public:
  StepOutcome(bool taken) : taken_(taken) {}  // NOLINT: decided on the host
  explicit StepOutcome(Tensor found_inf) : found_inf_(std::move(found_inf)) {}
  bool taken() const;
  operator bool() const { return taken(); }  // NOLINT: `if (scaler.step(opt))` reads naturally
  // The device flag (0: taken, 1: skipped) when the decision was made there, else undefined.
  const Tensor& found_inf() const { return found_inf_; }

 private:
  bool taken_ = true;
  Tensor found_inf_;
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options = GradScalerOptions());

  // outputs * scale, in fp32 (the result is fp32 whatever outputs' dtype). Disabled: outputs.
  Tensor scale(const Tensor& outputs);
  std::vector<Tensor> scale(const std::vector<Tensor>& outputs);

  void unscale_(optim::Optimizer& optimizer);
  // Runs optimizer.step() unless a gradient holds inf/NaN; the outcome says which. Disabled: runs
  // it and returns true.
  StepOutcome step(optim::Optimizer& optimizer);
  void update();
  void update(double new_scale);

  double get_scale() const;  // 1.0 when disabled
  int64_t get_growth_tracker() const;
  int64_t get_hysteresis_tracker() const;
  bool is_enabled() const { return options_.enabled(); }
  const GradScalerOptions& options() const { return options_; }
  double get_growth_factor() const { return options_.growth_factor(); }
  double get_backoff_factor() const { return options_.backoff_factor(); }
  int64_t get_growth_interval() const { return options_.growth_interval(); }
  void set_growth_factor(double v);
  void set_backoff_factor(double v);
  void set_growth_interval(int64_t v);

  int64_t skipped_steps() const;  // reads the device's count back
  // Stops a training that cannot recover: throws mixtrain::Error naming `step` when `loss` (the
  // step's unscaled loss, as the caller read it) is inf or NaN and loss scaling cannot help,
  // because the scaler is disabled (fp32 and bf16 training: the optimizer has stepped on it), its
  // scale is already at its floor (min_scale), or the loss was inf/NaN on nonfinite_loss_limit
  // calls in a row (the forward overflows; a finite loss resets the count). Otherwise it does
  // nothing: the scaler skips such a step and backs off. Reads the scale only for a non-finite
  // loss. The example trainers call it after every step.
  void check_loss(double loss, int64_t step);
  // Called in unscale_ with each inf/NaN flag (0-dim fp32, 0 or 1) before any decision uses it;
  // data-parallel training reduces it with MAX across ranks there, so that every rank skips or
  // steps together and the scale stays identical everywhere. Empty: none.
  void set_found_inf_hook(std::function<void(Tensor& found_inf)> hook) { found_inf_hook_ = std::move(hook); }
  // Statistics of the last completed iteration (track_stats); iteration == 0 before the first.
  const GradScalerStats& last_stats() const { return stats_; }

  // PyTorch's five keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker
  // (and _hysteresis_tracker when hysteresis > 1). Empty when disabled.
  nlohmann::json state_dict() const;
  // Checks every field first (present, right type, finite, in range) and rejects the document
  // whole, naming the field. Does nothing when disabled; an empty document is an error.
  void load_state_dict(const nlohmann::json& state);
  void validate_state_dict(const nlohmann::json& state) const;

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    std::vector<Tensor> found_inf;  // one per device holding gradients
  };
  struct Loaded;
  Loaded parse_state(const nlohmann::json& state) const;
  void move_state_to(Device device);
  double floor() const;  // the effective min_scale
  std::vector<Tensor> unscale_grads(optim::Optimizer& optimizer);

  GradScalerOptions options_;
  Tensor scale_;               // 0-dim fp32
  Tensor growth_tracker_;      // 0-dim int32
  Tensor hysteresis_tracker_;  // 0-dim int32
  Tensor at_min_scale_;        // 0-dim fp32, written by the update kernel
  std::map<std::pair<int, int>, Tensor> stats_parts_;  // per device, fp64 [4] (track_stats)
  bool device_fixed_ = false;  // the state moved to the first loss's device
  std::unordered_map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
  int64_t skipped_steps_ = 0;       // decided on the host
  Tensor device_skipped_steps_;     // float32 scalar: the sum of the flags of device-decided steps
  int64_t iterations_ = 0;
  bool warned_at_min_ = false;
  int64_t nonfinite_losses_ = 0;  // check_loss calls in a row with an inf/NaN loss
  int64_t nonfinite_since_ = 0;   // the step of the first of them
  GradScalerStats stats_;
  std::function<void(Tensor&)> found_inf_hook_;
};

}  // namespace mixtrain::amp
