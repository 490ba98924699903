#pragma once
// An optimizer's part of a checkpoint as data: what Optimizer::state_dict() and state_tensors()
// give. distributed::ZeroRedundancyOptimizer assembles it for the whole model from every rank's
// shard (so the checkpoint is the one the same optimizer over the whole model would write, and any
// run loads it), and takes its shard back from one read this way.
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "mixtrain/io/checkpoint.h"

namespace mixtrain::io {

struct OptimizerState {
  std::string type;       // Optimizer::name(): "AdamW", ...
  nlohmann::json state;   // as Optimizer::state_dict()
  NamedTensors tensors;   // as Optimizer::state_tensors() ("state.<index>.exp_avg", ...)
};

// save_checkpoint with the optimizer's part given as data (written as the Optimizer overload
// writes it; the caller vouches for it, as nothing here can check it against an optimizer).
void save_checkpoint(const std::string& dir, const NamedTensors& model, const OptimizerState& optimizer,
                     const amp::GradScaler& scaler, int64_t step, const nlohmann::json& extra,
                     const CheckpointParts& parts = {});
// load_checkpoint that returns the optimizer's part instead of applying it: `check` sees it
// (CPU tensors) after every other part is checked and before anything is applied, and throws to
// refuse the checkpoint; then the model, scaler, generator and parts are restored and `optimizer`
// holds the state. Returns the saved step.
int64_t load_checkpoint(const std::string& dir, const NamedTensors& model, OptimizerState& optimizer,
                        const std::function<void(const OptimizerState&)>& check, amp::GradScaler& scaler,
                        nlohmann::json* extra = nullptr, const CheckpointParts& parts = {});

}  // namespace mixtrain::io
