// The FP8 recipe and the model's FP8 scaling state (amp/fp8.h): which layers get state, the
// once-per-step update, the statistics, and the state's JSON with its validation.
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "backends/fp8.h"
#include "core/json_fields.h"
#include "mixtrain/amp/fp8.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/float8.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/memory/trace.h"
#include "mixtrain/ops/functional.h"

namespace mixtrain::amp {

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::Hybrid ? "hybrid" : "e4m3"; }
const char* fp8_scaling_name(Fp8ScalingMode s) { return s == Fp8ScalingMode::Delayed ? "delayed" : "current"; }
const char* fp8_amax_algorithm_name(Fp8AmaxAlgorithm a) { return a == Fp8AmaxAlgorithm::Max ? "max" : "most_recent"; }

void Fp8Recipe::validate() const {
  MT_CHECK(history_len_ >= 1 && history_len_ <= (int64_t{1} << 20), "Fp8Recipe: history_len must be in [1, 2^20], got ",
           history_len_);
  MT_CHECK(margin_ >= 0 && margin_ <= 64, "Fp8Recipe: margin must be in [0, 64], got ", margin_);
  MT_CHECK(dtype_ == kBFloat16 || dtype_ == kFloat16, "Fp8Recipe: dtype (of the other ops and the fp8 GEMMs' output) ",
           "must be bfloat16 or float16, got ", dtype_);
}

namespace {

constexpr int64_t kMaxUpdates = int64_t{1} << 62;

nlohmann::json recipe_json(const Fp8Recipe& r) {
  return {{"scaling", fp8_scaling_name(r.scaling())}, {"format", fp8_format_name(r.format())},
          {"history_len", r.history_len()},           {"amax_algorithm", fp8_amax_algorithm_name(r.amax_algorithm())},
          {"margin", r.margin()},                     {"dtype", dtype_name(r.dtype())}};
}

std::string joined(const std::string& prefix, const char* name) { return prefix.empty() ? name : prefix + "." + name; }

std::vector<double> host_values(const Tensor& t) {
  NoGradGuard no_grad;
  const Tensor c = t.to(Device::cpu()).to(kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

}  // namespace

bool Fp8Scaling::default_filter(const std::string&, const nn::LinearImpl& layer) {
  return layer.options().in_features() % 16 == 0 && layer.options().out_features() % 16 == 0;
}

Fp8Scaling::Fp8Scaling(nn::Module& model, const Fp8Recipe& recipe, Filter filter) : recipe_(recipe) {
  recipe_.validate();
  std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> modules;
  if (auto self = model.shared_from_this(); std::dynamic_pointer_cast<nn::LinearImpl>(self)) modules.emplace_back("", self);
  for (auto& m : model.named_modules()) modules.push_back(std::move(m));
  for (auto& [name, m] : modules) {
    auto linear = std::dynamic_pointer_cast<nn::LinearImpl>(m);
    if (!linear || (filter && !filter(name, *linear))) continue;
    linear->enable_fp8(recipe_.history_rows());
    const nn::LinearFp8State& st = *linear->fp8_state();
    for (const Tensor* t : {&st.amax_history, &st.scale, &st.scale_inv, &st.saturated})
      memory::tag_role(t->impl()->storage.get(), t->device(), memory::Role::Fp8State);
    const TensorOptions f32 = TensorOptions(kFloat32).device(linear->weight.device());
    last_amax_.push_back(zeros({3}, f32));
    last_scale_.push_back(ones({3}, f32));
    last_saturated_.push_back(zeros({3}, TensorOptions(kInt64).device(linear->weight.device())));
    for (const Tensor* t : {&last_amax_.back(), &last_scale_.back(), &last_saturated_.back()})
      memory::tag_role(t->impl()->storage.get(), t->device(), memory::Role::Fp8State);
    layers_.emplace_back(name, std::move(linear));
  }
}

std::vector<std::string> Fp8Scaling::layer_names() const {
  std::vector<std::string> out;
  for (const auto& l : layers_) out.push_back(l.first);
  return out;
}

std::vector<std::string> Fp8Scaling::tensor_names() const {
  std::vector<std::string> out;
  for (const auto& l : layers_)
    for (const char* n : {"fp8_amax_history", "fp8_scale", "fp8_scale_inv"}) out.push_back(joined(l.first, n));
  return out;
}

void Fp8Scaling::update() {
  MT_CHECK(updates_ < kMaxUpdates, "Fp8Scaling.update: ", updates_, " updates, the most the counter takes (2^62)");
  NoGradGuard no_grad;
  if (reduce_hook_ && !layers_.empty()) {
    std::vector<Tensor> rows;
    for (const auto& l : layers_) rows.push_back(l.second->fp8_state()->amax_history.select(0, 0));
    Tensor all = stack(rows, 0);
    reduce_hook_(all);
    for (size_t i = 0; i < layers_.size(); ++i) rows[i].copy_(all.select(0, static_cast<int64_t>(i)));
  }
  backends::Fp8ScaleArgs args;
  args.fp8_max[0] = args.fp8_max[1] = kFloat8E4M3Max;
  args.fp8_max[2] = recipe_.format() == Fp8Format::Hybrid ? kFloat8E5M2Max : kFloat8E4M3Max;
  args.margin = recipe_.margin();
  args.max_over_history = recipe_.amax_algorithm() == Fp8AmaxAlgorithm::Max;
  for (size_t i = 0; i < layers_.size(); ++i) {
    nn::LinearFp8State& st = *layers_[i].second->fp8_state();
    last_amax_[i].copy_(st.amax_history.select(0, 0));
    last_scale_[i].copy_(st.scale);
    last_saturated_[i].copy_(st.saturated);
    st.saturated.zero_();
    if (recipe_.scaling() == Fp8ScalingMode::Delayed)
      backends::fp8_update_scale(st.amax_history, st.amax_history, st.scale, st.scale_inv, args);
    else
      st.amax_history.zero_();  // current scaling keeps this step's amaxes only, for the statistics
    ++st.generation;
  }
  ++updates_;
}

std::vector<Fp8LayerStats> Fp8Scaling::stats() const {
  std::vector<Fp8LayerStats> out;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Fp8LayerStats s;
    s.name = layers_[i].first;
    const std::vector<double> a = host_values(last_amax_[i]), sc = host_values(last_scale_[i]),
                              n = host_values(last_saturated_[i]);
    for (int j = 0; j < 3; ++j) {
      s.amax[j] = static_cast<float>(a[j]);
      s.scale[j] = static_cast<float>(sc[j]);
      s.saturated[j] = static_cast<int64_t>(n[j]);
    }
    out.push_back(s);
  }
  return out;
}

nlohmann::json Fp8Scaling::state_dict() const {
  return {{"recipe", recipe_json(recipe_)}, {"layers", layer_names()}, {"updates", updates_}};
}

void Fp8Scaling::validate_state_dict(const nlohmann::json& state, const std::map<std::string, Tensor>& tensors) const {
  const std::string where = "fp8";
  MT_CHECK(state.is_object(), where, ": expected an object");
  json_io::check_object_keys(state, {"recipe", "layers", "updates"}, {}, where);
  const nlohmann::json mine = recipe_json(recipe_);
  const nlohmann::json& saved = state["recipe"];
  json_io::check_object_keys(saved, {"scaling", "format", "history_len", "amax_algorithm", "margin", "dtype"}, {},
                             where + ".recipe");
  for (const auto& [key, value] : mine.items())
    MT_CHECK(saved[key] == value, where, ".recipe.", key, " is ", saved[key].dump(), " in the checkpoint but ",
             value.dump(), " in this run's recipe (resume with the recipe the checkpoint was trained with)");
  const nlohmann::json& names = state["layers"];
  MT_CHECK(names.is_array() && names == nlohmann::json(layer_names()), where, ".layers ", names.dump(),
           " are not this model's FP8 layers ", nlohmann::json(layer_names()).dump());
  // The counter goes up once a step: one near 2^63 would wrap within the run it resumes.
  json_io::json_integer(state, "updates", where, 0, kMaxUpdates);
  for (const auto& entry : layers_) {
    // Not a structured binding: lambdas capture those only from C++20 (clang refuses it in C++17).
    const std::string& layer = entry.first;
    const int64_t rows = entry.second->fp8_state()->amax_history.size(0);
    auto get = [&](const char* n, const Shape& shape) -> std::vector<double> {
      const std::string name = joined(layer, n);
      auto it = tensors.find(name);
      MT_CHECK(it != tensors.end(), where, ": no tensor \"", name, "\" (the FP8 state of layer \"", layer, "\")");
      const Tensor& t = it->second;
      MT_CHECK(t.defined() && t.shape() == shape && t.dtype() == kFloat32, where, ": tensor \"", name, "\" is ",
               t.defined() ? t.summary() : std::string("undefined"), ", expected ", shape_str(shape), " float32");
      return host_values(t);
    };
    const std::vector<double> scale = get("fp8_scale", {3}), inv = get("fp8_scale_inv", {3});
    const std::vector<double> history = get("fp8_amax_history", {rows, 3});
    for (int j = 0; j < 3; ++j)
      MT_CHECK(std::isfinite(scale[j]) && scale[j] > 0, where, ": \"", joined(layer, "fp8_scale"), "\"[", j, "] is ",
               scale[j], "; a scale must be finite and positive");
    for (int j = 0; j < 3; ++j) {
      // A scale whose inverse overflows (1e-40: inverse inf) turns the next GEMM's output to NaN.
      MT_CHECK(std::isfinite(inv[j]) && inv[j] > 0, where, ": \"", joined(layer, "fp8_scale_inv"), "\"[", j,
               "] is ", inv[j], " (for a scale of ", scale[j], "); an inverse scale must be finite and positive");
      MT_CHECK(inv[j] == static_cast<double>(1.0f / static_cast<float>(scale[j])) &&
                   std::abs(scale[j] * inv[j] - 1.0) < 1e-3,
               where, ": \"", joined(layer, "fp8_scale_inv"), "\"[", j, "] is ", inv[j], " but 1 / scale is ",
               1.0f / static_cast<float>(scale[j]), " (scale and inverse scale disagree)");
    }
    for (size_t k = 0; k < history.size(); ++k)
      MT_CHECK(std::isfinite(history[k]) && history[k] >= 0, where, ": \"", joined(layer, "fp8_amax_history"),
               "\" element ", k, " is ", history[k], "; an amax is finite, >= 0 and not NaN");
  }
}

void Fp8Scaling::load_state_dict(const nlohmann::json& state) {
  std::map<std::string, Tensor> tensors;
  for (const auto& [layer, module] : layers_) {
    const nn::LinearFp8State& st = *module->fp8_state();
    tensors.emplace(joined(layer, "fp8_amax_history"), st.amax_history);
    tensors.emplace(joined(layer, "fp8_scale"), st.scale);
    tensors.emplace(joined(layer, "fp8_scale_inv"), st.scale_inv);
  }
  validate_state_dict(state, tensors);
  NoGradGuard no_grad;
  updates_ = state["updates"].get<int64_t>();
  for (size_t i = 0; i < layers_.size(); ++i) {
    nn::LinearFp8State& st = *layers_[i].second->fp8_state();
    ++st.generation;  // the scales changed under any cached fp8 weight
    st.saturated.zero_();
    last_amax_[i].zero_();
    last_scale_[i].copy_(st.scale);
    last_saturated_[i].zero_();
  }
}

}  // namespace mixtrain::amp
