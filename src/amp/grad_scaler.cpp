#include "core/json_limits.h"
#include "mixtrain/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "backends/amp.h"
#include "core/json_fields.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/memory/trace.h"
#include "mixtrain/ops/functional.h"

namespace mixtrain::amp {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

void check_growth_factor(double v, const char* who) {
  MT_CHECK(std::isfinite(v) && v > 1.0, who, ": growth_factor must be a finite value > 1, got ", v);
}
void check_backoff_factor(double v, const char* who) {
  MT_CHECK(v > 0.0 && v < 1.0, who, ": backoff_factor must be in (0, 1), got ", v);
}
void check_growth_interval(int64_t v, const char* who) {
  MT_CHECK(v >= 1 && v <= kInt32Max, who, ": growth_interval must be in [1, ", kInt32Max, "], got ", v);
}

// A scale must survive the trip into the fp32 scale tensor as a positive finite value, and so
// must its inverse as unscale_grads computes it (in fp64, then rounded to fp32).
bool valid_scale(double v) {
  if (!(std::isfinite(v) && v > 0.0)) return false;
  const float f = static_cast<float>(v);
  return std::isfinite(f) && f > 0.0f && std::isfinite(static_cast<float>(1.0 / static_cast<double>(f)));
}

// Refuses a scale with the reason: not positive and finite in float32, or an inverse that
// overflows float32.
void check_scale(double v, const std::string& what) {
  if (valid_scale(v)) return;
  const float f = static_cast<float>(v);
  MT_CHECK(std::isfinite(v) && v > 0.0 && std::isfinite(f) && f > 0.0f, what,
           " must be > 0, finite and within float32 range, got ", v);
  MT_ERROR(what, " = ", v, " is so small that its inverse overflows float32 (1/scale = inf would turn every ",
           "unscaled gradient into inf or NaN); the lowest scale is 2^-126 = 1.17549435e-38 (amp::kScaleFloor)");
}

}  // namespace

struct GradScaler::Loaded {
  double scale, growth_factor, backoff_factor;
  int64_t growth_interval, growth_tracker;
  std::optional<int64_t> hysteresis_tracker;
};

GradScaler::GradScaler(const GradScalerOptions& o) : options_(o) {
  const char* who = "GradScalerOptions";
  check_scale(o.init_scale(), std::string(who) + ": init_scale");
  check_growth_factor(o.growth_factor(), who);
  check_backoff_factor(o.backoff_factor(), who);
  check_growth_interval(o.growth_interval(), who);
  MT_CHECK(o.hysteresis() >= 1 && o.hysteresis() <= kInt32Max, who, ": hysteresis must be in [1, ", kInt32Max,
           "], got ", o.hysteresis());
  MT_CHECK(std::isfinite(o.min_scale()) && o.min_scale() >= 0.0, who, ": min_scale must be a finite value >= 0, got ",
           o.min_scale());
  MT_CHECK(o.nonfinite_loss_limit() >= 1, who, ": nonfinite_loss_limit must be at least 1, got ",
           o.nonfinite_loss_limit());
  MT_CHECK(o.max_scale() > 0.0, who, ": max_scale must be > 0 (infinity for no ceiling), got ", o.max_scale());
  MT_CHECK(floor() <= o.max_scale(), who, ": min_scale (", floor(), ") must not exceed max_scale (", o.max_scale(),
           ")");
  MT_CHECK(o.init_scale() >= floor() && o.init_scale() <= o.max_scale(), who, ": init_scale (", o.init_scale(),
           ") must lie in [min_scale, max_scale] = [", floor(), ", ", o.max_scale(), "]");
  // The state is created at once (on the CPU; scale() moves it to the loss's device the first
  // time), so unscale_/update after a resume cannot meet a missing scale as in PyTorch.
  scale_ = full({}, o.init_scale(), TensorOptions(kFloat32));
  growth_tracker_ = zeros({}, TensorOptions(kInt32));
  hysteresis_tracker_ = full({}, static_cast<double>(o.hysteresis()), TensorOptions(kInt32));
  at_min_scale_ = zeros({}, TensorOptions(kFloat32));
}

double GradScaler::floor() const { return std::max(options_.min_scale(), kScaleFloor); }

void GradScaler::move_state_to(Device device) {
  scale_ = scale_.to(device);
  growth_tracker_ = growth_tracker_.to(device);
  hysteresis_tracker_ = hysteresis_tracker_.to(device);
  at_min_scale_ = at_min_scale_.to(device);
  for (const Tensor* t : {&scale_, &growth_tracker_, &hysteresis_tracker_, &at_min_scale_})
    memory::tag_role(t->impl()->storage.get(), device, memory::Role::OptimizerState);
}

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!is_enabled()) return outputs;
  MT_CHECK(outputs.defined(), "GradScaler.scale: undefined tensor");
  MT_CHECK(is_floating(outputs.dtype()), "GradScaler.scale: expected a floating tensor (the loss), got ", outputs.summary());
  if (!device_fixed_) {
    if (outputs.device() != scale_.device()) move_state_to(outputs.device());
    device_fixed_ = true;
  }
  // In fp32 whatever the loss dtype: an fp16 loss times 65536 would overflow before backward.
  const Tensor s = outputs.device() == scale_.device() ? scale_ : scale_.to(outputs.device());
  return outputs.to(kFloat32) * s;
}

std::vector<Tensor> GradScaler::scale(const std::vector<Tensor>& outputs) {
  std::vector<Tensor> out;
  out.reserve(outputs.size());
  for (const Tensor& t : outputs) out.push_back(scale(t));
  return out;
}

std::vector<Tensor> GradScaler::unscale_grads(optim::Optimizer& opt) {
  NoGradGuard no_grad;
  const std::vector<Tensor> params = opt.parameters();
  const std::vector<Tensor> masters = opt.master_params();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    if (!g.defined() || !is_half(g.dtype()) || !masters[i].is_same(params[i])) continue;
    MT_ERROR("GradScaler.unscale_: parameter ", i, " of the ", opt.name(), " optimizer has a ", g.dtype(),
             " gradient ", shape_str(g.shape()), " and no fp32 master copy. Attempting to unscale ", g.dtype(),
             " gradients in place would flush small gradients to zero and lose the update. Build the optimizer with ",
             "the master_weights option (e.g. ", opt.name(), "Options().master_weights(true)): the scaler then writes ",
             "unscaled fp32 master gradients and the update runs in fp32. Or keep the parameters in float32 and run ",
             "the forward pass under autocast.");
  }
  const std::vector<optim::Optimizer::UnscaleTarget> targets = opt.unscale_targets();

  // inv_scale = 1 / scale with the reciprocal in fp64 (fp32 division may be inexact under some
  // compile options, as PyTorch notes), as device ops: no host round trip.
  const Tensor inv = rdiv(scale_.to(kFloat64), 1.0).to(kFloat32);

  // One fused pass per (device, gradient dtype, output dtype).
  using Key = std::tuple<int, int, int, int>;
  std::map<Key, std::pair<std::vector<Tensor>, std::vector<Tensor>>> buckets;
  for (const auto& t : targets) {
    const Device d = t.grad.device();
    Key k{static_cast<int>(d.type), d.index, static_cast<int>(t.grad.dtype()), static_cast<int>(t.out.dtype())};
    buckets[k].first.push_back(t.grad);
    buckets[k].second.push_back(t.out);
  }
  std::map<std::pair<int, int>, Tensor> found_by_device;
  for (auto& [key, lists] : buckets) {
    const Device d = lists.first.front().device();
    const std::pair<int, int> dk{static_cast<int>(d.type), d.index};
    auto it = found_by_device.find(dk);
    if (it == found_by_device.end())
      it = found_by_device.emplace(dk, zeros({}, TensorOptions(kFloat32).device(d))).first;
    Tensor stats;
    if (options_.track_stats() && !scale_.device().is_meta()) {
      auto s = stats_parts_.find(dk);
      if (s == stats_parts_.end())
        s = stats_parts_.emplace(dk, zeros({backends::kAmpStatsSize}, TensorOptions(kFloat64).device(d))).first;
      stats = s->second;
    }
    backends::non_finite_check_and_unscale(d.type, lists.first, lists.second, inv.to(d), it->second, stats);
    for (const Tensor& out : lists.second) out.bump_version();  // written in place by the kernel
  }
  std::vector<Tensor> found;
  for (auto& [dk, f] : found_by_device) found.push_back(f);
  return found;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!is_enabled()) return;
  memory::PhaseScope phase(memory::Phase::Optimizer);
  PerOptimizer& st = per_optimizer_[&optimizer];
  MT_CHECK(st.stage != Stage::Unscaled,
           "GradScaler.unscale_: unscale_() has already been called on this optimizer since the last update().");
  MT_CHECK(st.stage != Stage::Stepped, "GradScaler.unscale_: unscale_() is being called after step().");
  st.found_inf = unscale_grads(optimizer);
  if (found_inf_hook_)
    for (Tensor& f : st.found_inf) found_inf_hook_(f);
  st.stage = Stage::Unscaled;
}

bool StepOutcome::taken() const {
  if (found_inf_.defined() && found_inf_.device().is_meta()) {
    memory::note_assumption("GradScaler.step: found_inf is on meta; assumed 0, the step was taken");
    return true;
  }
  return found_inf_.defined() ? found_inf_.item<float>() == 0.0f : taken_;
}

StepOutcome GradScaler::step(optim::Optimizer& optimizer) {
  memory::PhaseScope phase(memory::Phase::Optimizer);
  if (!is_enabled()) {
    optimizer.step();
    return StepOutcome(true);
  }
  PerOptimizer& st = per_optimizer_[&optimizer];
  MT_CHECK(st.stage != Stage::Stepped, "GradScaler.step: step() has already been called since the last update().");
  if (st.stage == Stage::Ready) unscale_(optimizer);
  MT_CHECK(!st.found_inf.empty(), "GradScaler.step: No inf checks were recorded for this optimizer.");
  st.stage = Stage::Stepped;
  if (st.found_inf.size() == 1) {
    // All gradients on one device: its kernels decide, and nothing is read back.
    NoGradGuard no_grad;
    const Tensor& found = st.found_inf.front();
    optimizer.step(found);
    device_skipped_steps_ = device_skipped_steps_.defined()
                                ? device_skipped_steps_ + found.to(device_skipped_steps_.device())
                                : found.clone();
    return StepOutcome(found);
  }
  // Gradients on several devices: one host read of their flags.
  float found = 0.0f;
  for (const Tensor& f : st.found_inf) {
    if (f.device().is_meta()) {  // a dry run cannot read the flag: take the step, as a finite one would
      memory::note_assumption("GradScaler.step: found_inf is on meta; assumed 0, the step was taken");
      continue;
    }
    found += f.item<float>();
  }
  const bool ok = found == 0.0f;
  if (ok) {
    optimizer.step();
  } else {
    optimizer.mark_step_skipped();
    ++skipped_steps_;
  }
  return StepOutcome(ok);
}

int64_t GradScaler::skipped_steps() const {
  return skipped_steps_ +
         (device_skipped_steps_.defined() ? static_cast<int64_t>(device_skipped_steps_.item<float>()) : 0);
}

void GradScaler::update() {
  if (!is_enabled()) return;
  memory::PhaseScope phase(memory::Phase::Optimizer);
  NoGradGuard no_grad;
  std::vector<Tensor> all;
  for (auto& [opt, st] : per_optimizer_)
    for (const Tensor& f : st.found_inf) all.push_back(f);
  if (all.empty()) {
    per_optimizer_.clear();
    MT_ERROR("GradScaler.update: No inf checks were recorded prior to update.");
  }
  // Summed, so any nonzero flag means an overflow somewhere (PyTorch's rule).
  Tensor found = all[0].to(scale_.device());
  for (size_t i = 1; i < all.size(); ++i) found = found + all[i].to(scale_.device());
  const double scale_before = options_.track_stats() && !scale_.device().is_meta() ? get_scale() : 0.0;

  backends::ScaleUpdateArgs args;
  args.growth_factor = options_.growth_factor();
  args.backoff_factor = options_.backoff_factor();
  args.growth_interval = options_.growth_interval();
  args.hysteresis = options_.hysteresis();
  args.min_scale = floor();
  args.max_scale = std::isinf(options_.max_scale()) ? 0.0 : options_.max_scale();
  backends::update_scale(scale_.device().type, scale_, growth_tracker_, hysteresis_tracker_, found, args, at_min_scale_);
  scale_.bump_version();  // scale(loss) saved it for backward: a backward after update() must not use the new one
  per_optimizer_.clear();
  ++iterations_;

  const bool on_meta = scale_.device().is_meta();
  if (on_meta && (options_.track_stats() || options_.min_scale() > kScaleFloor || options_.error_at_min_scale()))
    memory::note_assumption("GradScaler.update: the scale is on meta; statistics and the min_scale check, which "
                            "read values, were skipped (found_inf assumed 0)");
  if (options_.track_stats() && !on_meta) {
    // Opt-in: reading the statistics back is a host synchronisation.
    GradScalerStats s;
    s.iteration = iterations_;
    s.found_inf = found.item<float>() != 0.0f;
    s.skipped_steps = skipped_steps();
    s.scale = scale_before;
    s.next_scale = get_scale();
    double acc[backends::kAmpStatsSize] = {0, 0, 0, 0};
    for (auto& [dk, t] : stats_parts_) {
      const std::vector<double> v = t.to_vector<double>();
      acc[backends::kAmpStatMaxAbs] = std::max(acc[backends::kAmpStatMaxAbs], v[backends::kAmpStatMaxAbs]);
      for (int k = 1; k < backends::kAmpStatsSize; ++k) acc[k] += v[static_cast<size_t>(k)];
    }
    stats_parts_.clear();
    s.max_abs_scaled_grad = acc[backends::kAmpStatMaxAbs];
    s.num_elements = static_cast<int64_t>(acc[backends::kAmpStatElements]);
    if (s.num_elements > 0) {
      s.zero_fraction = acc[backends::kAmpStatZeros] / acc[backends::kAmpStatElements];
      s.fp16_subnormal_fraction = acc[backends::kAmpStatFp16Subnormal] / acc[backends::kAmpStatElements];
    }
    stats_ = s;
  }

  if (!on_meta && (options_.min_scale() > kScaleFloor || options_.error_at_min_scale())) {
    // Opt-in as well: the check reads one flag back. (At the default floor, kScaleFloor, the scale
    // just stays there and overflowing steps keep being skipped; nothing is read back.)
    if (at_min_scale_.item<float>() != 0.0f) {
      const std::string msg = "GradScaler.update: gradients overflowed (inf/NaN) with the scale already at min_scale = " +
                              std::to_string(floor()) +
                              ", so it cannot back off further; the inf/NaN is likely not a scaling problem (check "
                              "the inputs and the loss, lower the learning rate, or clip gradients)";
      MT_CHECK(!options_.error_at_min_scale(), msg, ". (error_at_min_scale(false) turns this error into a warning.)");
      if (!warned_at_min_) std::fprintf(stderr, "mixtrain warning: %s\n", msg.c_str());
      warned_at_min_ = true;
    } else if (found.item<float>() == 0.0f) {
      warned_at_min_ = false;  // a clean step ends the episode; warn again at the next collapse
    }
  }
}

void GradScaler::update(double new_scale) {
  if (!is_enabled()) return;
  check_scale(new_scale, "GradScaler.update: new_scale");
  MT_CHECK(new_scale >= floor() && new_scale <= options_.max_scale(), "GradScaler.update: new_scale = ", new_scale,
           " lies outside [min_scale, max_scale] = [", floor(), ", ", options_.max_scale(), "]");
  scale_.fill_(new_scale);  // the growth tracker is left as it is, as in PyTorch
  per_optimizer_.clear();
  stats_parts_.clear();
  ++iterations_;
}

void GradScaler::check_loss(double loss, int64_t step) {
  if (std::isfinite(loss)) {
    nonfinite_losses_ = 0;
    return;
  }
  if (nonfinite_losses_++ == 0) nonfinite_since_ = step;
  const char* value = std::isnan(loss) ? "NaN" : loss > 0 ? "inf" : "-inf";  // not printf's "-nan"
  if (!is_enabled())
    MT_ERROR("step ", step, ": the training loss is ", value, ", and there is no loss scale to lower (the GradScaler is ",
             "disabled, as in fp32 and bf16 training), so the optimizer stepped on non-finite gradients; stopping. ",
             "The weights are likely no longer finite: lower the learning rate or check the data");
  const double scale = get_scale();
  // The update kernel clamps in fp32, so the floor is compared as the fp32 value it stores.
  if (scale <= static_cast<double>(static_cast<float>(floor())))
    MT_ERROR("step ", step, ": the training loss is ", value, " and the GradScaler's scale is at its floor (", scale,
             "), so backing off cannot help; stopping. The weights or the optimizer state are likely no longer ",
             "finite: lower the learning rate or check the data");
  if (nonfinite_losses_ >= options_.nonfinite_loss_limit())
    MT_ERROR("step ", step, ": the training loss has been inf or NaN on every step since step ", nonfinite_since_, " (",
             nonfinite_losses_, " in a row, GradScalerOptions' nonfinite_loss_limit; now ", value,
             "). The scaler skips such steps, but lowering the loss scale cannot make the loss finite: the scale ",
             "multiplies only the backward pass, and the loss comes from the forward, which overflows with these ",
             "weights (in fp16 beyond 65504); stopping. Lower the learning rate (mixtrain train: --lr) or train in ",
             "bf16 (--precision bf16), which has float32's range; or check the data");
}

double GradScaler::get_scale() const { return is_enabled() ? static_cast<double>(scale_.item<float>()) : 1.0; }
int64_t GradScaler::get_growth_tracker() const { return is_enabled() ? growth_tracker_.item<int32_t>() : 0; }
int64_t GradScaler::get_hysteresis_tracker() const { return is_enabled() ? hysteresis_tracker_.item<int32_t>() : 0; }

void GradScaler::set_growth_factor(double v) {
  check_growth_factor(v, "GradScaler.set_growth_factor");
  options_.growth_factor(v);
}
void GradScaler::set_backoff_factor(double v) {
  check_backoff_factor(v, "GradScaler.set_backoff_factor");
  options_.backoff_factor(v);
}
void GradScaler::set_growth_interval(int64_t v) {
  check_growth_interval(v, "GradScaler.set_growth_interval");
  options_.growth_interval(v);
}

nlohmann::json GradScaler::state_dict() const {
  if (!is_enabled()) return nlohmann::json::object();
  nlohmann::json j = {{"scale", get_scale()},
                      {"growth_factor", options_.growth_factor()},
                      {"backoff_factor", options_.backoff_factor()},
                      {"growth_interval", options_.growth_interval()},
                      {"_growth_tracker", get_growth_tracker()}};
  if (options_.hysteresis() > 1) j["_hysteresis_tracker"] = get_hysteresis_tracker();
  return j;
}

GradScaler::Loaded GradScaler::parse_state(const nlohmann::json& state) const {
  const std::string where = "GradScaler.load_state_dict";
  mixtrain::detail::check_json_depth(state, where);
  MT_CHECK(state.is_object(), where, ": expected a JSON object, got ", state.type_name());
  MT_CHECK(!state.empty(), where, ": The source state dict is empty, possibly because it was saved from a disabled ",
           "instance of GradScaler.");
  json_io::check_object_keys(state, {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"},
                             {"_hysteresis_tracker"}, where);
  Loaded l;
  l.scale = json_io::json_number(state, "scale", where);
  check_scale(l.scale, where + ".scale");
  MT_CHECK(l.scale >= floor() && l.scale <= options_.max_scale(), where, ".scale = ", l.scale,
           " lies outside [min_scale, max_scale] = [", floor(), ", ", options_.max_scale(), "]");
  l.growth_factor = json_io::json_number(state, "growth_factor", where);
  check_growth_factor(l.growth_factor, (where + ".growth_factor").c_str());
  l.backoff_factor = json_io::json_number(state, "backoff_factor", where);
  check_backoff_factor(l.backoff_factor, (where + ".backoff_factor").c_str());
  l.growth_interval = json_io::json_integer(state, "growth_interval", where, 1, kInt32Max);
  l.growth_tracker = json_io::json_integer(state, "_growth_tracker", where, 0, kInt32Max);
  if (state.contains("_hysteresis_tracker"))
    // The tracker counts down from hysteresis; a larger value would postpone (or, near
    // INT32_MAX, disable) backing off on overflow.
    l.hysteresis_tracker = json_io::json_integer(state, "_hysteresis_tracker", where, 0, options_.hysteresis());
  return l;
}

void GradScaler::validate_state_dict(const nlohmann::json& state) const {
  if (is_enabled()) parse_state(state);
}

void GradScaler::load_state_dict(const nlohmann::json& state) {
  if (!is_enabled()) return;
  const Loaded l = parse_state(state);
  // A loaded state starts a new iteration: an unscale_ or step of one that a failure interrupted
  // (an elastic job going back to its checkpoint) is forgotten.
  per_optimizer_.clear();
  // Saved hyper-parameters override the constructor's, as in PyTorch.
  options_.growth_factor(l.growth_factor).backoff_factor(l.backoff_factor).growth_interval(l.growth_interval);
  NoGradGuard no_grad;
  scale_.fill_(l.scale);
  growth_tracker_.fill_(static_cast<double>(l.growth_tracker));
  hysteresis_tracker_.fill_(static_cast<double>(l.hysteresis_tracker.value_or(options_.hysteresis())));
}

}  // namespace mixtrain::amp
