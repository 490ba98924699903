#pragma once
// FP8 training (docs/FP8.md): a recipe (how tensors are scaled into fp8), the model's per-layer
// scaling state and its once-per-step update (Fp8Scaling), and the scope under which every
// nn::Linear that has the state runs in FP8 while bf16 autocast covers the rest
// (Fp8AutocastGuard). The loop:
//
//   amp::Fp8Recipe recipe;                       // delayed scaling, HYBRID, history 1024, max
//   amp::Fp8Scaling fp8(model, recipe);          // every Linear gets scales and an amax history
//   for (...) {
//     opt.zero_grad();
//     { amp::Fp8AutocastGuard scope(device, recipe); loss = loss_fn(model(x), y); }
//     loss.backward();
//     opt.step();
//     fp8.update();                              // amaxes -> scales, once per optimizer step
//   }
//
// The state is the modules' buffers (saved with the model) plus the JSON of state_dict() (saved
// by io::save_checkpoint when given as CheckpointParts::fp8): a resumed run scales exactly as the
// uninterrupted one would.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/base/arg.h"
#include "mixtrain/core/tensor.h"
#include "mixtrain/nn/linear.h"
#include "mixtrain/nn/module.h"

namespace mixtrain::amp {

// HYBRID: e4m3fn for inputs and weights in forward, e5m2 for gradients in backward
// (TransformerEngine's default). E4M3: e4m3fn everywhere.
enum class Fp8Format { Hybrid, E4M3 };
// Delayed: the scale of step t comes from the amax history of the steps before it (one read of
// each tensor). Current (PyTorch's "tensorwise"): from the tensor's own amax, at the cost of one
// more read.
enum class Fp8ScalingMode { Delayed, Current };
// The amax a delayed scale is computed from: the max over the history, or the most recent step's.
enum class Fp8AmaxAlgorithm { Max, MostRecent };

const char* fp8_format_name(Fp8Format f);                  // "hybrid", "e4m3"
const char* fp8_scaling_name(Fp8ScalingMode s);            // "delayed", "current"
const char* fp8_amax_algorithm_name(Fp8AmaxAlgorithm a);   // "max", "most_recent"

class Fp8Recipe {
  MT_ARG(Fp8ScalingMode, scaling) = Fp8ScalingMode::Delayed;
  MT_ARG(Fp8Format, format) = Fp8Format::Hybrid;
  MT_ARG(int64_t, history_len) = 1024;                            // TransformerEngine's default
  MT_ARG(Fp8AmaxAlgorithm, amax_algorithm) = Fp8AmaxAlgorithm::Max;
  MT_ARG(int, margin) = 0;                                        // scale = max / amax / 2^margin
  MT_ARG(DType, dtype) = kBFloat16;  // autocast dtype of the other ops, and the fp8 GEMMs' output

 public:
  // Throws mixtrain::Error naming the bad field: history_len >= 1, margin in [0, 64], dtype bf16
  // or fp16.
  void validate() const;
  // Rows of amax history a layer keeps: history_len, or 1 for current scaling (which records the
  // step's amaxes only, for the statistics).
  int64_t history_rows() const { return scaling_ == Fp8ScalingMode::Current ? 1 : history_len_; }
};

// RAII: under it (this thread, tensors of `device`'s type), every nn::Linear with FP8 state runs
// in FP8 as the recipe says, and autocast to recipe.dtype() covers everything else (an
// amp::AutocastGuard is part of the scope). The weights' fp8 copies are cached for the outermost
// scope, as autocast caches its casts. Nests like AutocastGuard; enabled = false turns both off.
class Fp8AutocastGuard {
 public:
  explicit Fp8AutocastGuard(DeviceType device, const Fp8Recipe& recipe = Fp8Recipe(), bool enabled = true);
  ~Fp8AutocastGuard();
  Fp8AutocastGuard(const Fp8AutocastGuard&) = delete;
  Fp8AutocastGuard& operator=(const Fp8AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  std::shared_ptr<const Fp8Recipe> prev_recipe_;
  AutocastGuard autocast_;
};

bool is_fp8_autocast_enabled(DeviceType device);

// One layer's statistics of the last completed step (the one before the last update()).
struct Fp8LayerStats {
  std::string name;                 // the Linear's dotted name in the model
  std::array<float, 3> amax{};      // input, weight, grad output: max |x| over the step
  std::array<float, 3> scale{};     // the scales the step cast with
  std::array<int64_t, 3> saturated{};  // values clamped to +-max (a layer overflowing if not 0)
};

// The model's FP8 scaling: gives the chosen nn::Linear layers their state (LinearImpl::enable_fp8)
// and updates it once per optimizer step.
class Fp8Scaling {
 public:
  using Filter = std::function<bool(const std::string& name, const nn::LinearImpl& layer)>;
  // The default filter: in_features and out_features multiples of 16 (cuBLASLt's fp8 GEMM needs
  // them; torchao skips such layers too), so the CPU emulation and a GPU run convert the same layers.
  static bool default_filter(const std::string& name, const nn::LinearImpl& layer);

  explicit Fp8Scaling(nn::Module& model, const Fp8Recipe& recipe = Fp8Recipe(), Filter filter = default_filter);

  const Fp8Recipe& recipe() const { return recipe_; }
  std::vector<std::string> layer_names() const;
  size_t num_layers() const { return layers_.size(); }

  // Once per optimizer step, after it: the step's amaxes (row 0 of each history) go through the
  // reduce hook (data parallel: MAX over ranks, so every rank computes the same scales), the
  // statistics are kept, then (delayed scaling) the scales are recomputed from the histories and
  // the histories move down a row. No host synchronisation.
  void update();
  // Called in update() with the step's amaxes, fp32 [layers, 3] on the model's device.
  void set_amax_reduce_hook(std::function<void(Tensor& amaxes)> hook) { reduce_hook_ = std::move(hook); }
  int64_t updates() const { return updates_; }

  // Reads the last completed step's statistics back (a synchronisation on a GPU).
  std::vector<Fp8LayerStats> stats() const;

  // {"recipe": {...}, "layers": [names], "updates": n}. The scales and histories themselves are
  // the layers' buffers, saved with the model.
  nlohmann::json state_dict() const;
  // Checks the document (the recipe and layers must be this object's) and the layers' state
  // tensors as they would be loaded (`tensors`: by the model's dotted names; finite scales > 0,
  // scale_inv == 1 / scale in fp32, amaxes >= 0 and not NaN); throws naming the field or tensor.
  void validate_state_dict(const nlohmann::json& state, const std::map<std::string, Tensor>& tensors) const;
  // Applies the document (after the buffers were loaded): the update count, and fresh weight
  // casts from the loaded scales.
  void load_state_dict(const nlohmann::json& state);
  // The model's dotted names of the state buffers, three per layer.
  std::vector<std::string> tensor_names() const;

 private:
  Fp8Recipe recipe_;
  std::vector<std::pair<std::string, std::shared_ptr<nn::LinearImpl>>> layers_;
  std::vector<Tensor> last_amax_, last_scale_, last_saturated_;  // per layer, the last step's
  std::function<void(Tensor&)> reduce_hook_;
  int64_t updates_ = 0;
};

}  // namespace mixtrain::amp
