#pragma once
// An optimizer's part of a checkpoint as data: what Optimizer::state_dict() and state_tensors()
// give. distributed::ZeroRedundancyOptimizer assembles it for the whole model from every rank's
// shard (so the checkpoint is the one the same optimizer over the whole model would write, and any
// run loads it), and takes its shard back from one read this way. A sharded checkpoint keeps the
// whole model's state in pieces, one file per rank (distributed::save_sharded_checkpoint); any
// optimizer loads it whole or as the pieces it holds (OptimizerPieces).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

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

// Elements [offset, offset + numel) of parameter `param`'s state tensors, flattened (`param`: its
// index in the whole model's optimizer state, "state.<param>.exp_avg").
struct StatePiece {
  size_t param = 0;
  int64_t offset = 0, numel = 0;
};

// How a sharded optimizer cuts the whole model's state: the parameters (names for messages, shapes)
// and each rank's pieces, in the order of that rank's optimizer (piece k's state tensors are its
// "state.<k>.exp_avg", ...). The index of a sharded checkpoint records it.
struct ShardLayout {
  std::vector<std::string> param_names;
  std::vector<Shape> param_shapes;
  std::vector<std::vector<StatePiece>> ranks;
};

// An optimizer that holds pieces of the whole model's state (a ZeRO shard), as load_checkpoint fills it.
struct OptimizerPieces {
  std::vector<StatePiece> pieces;
  // Sees the whole model's state (its JSON; zero-stride stand-ins of its tensors, shapes and dtypes
  // only) after every other part of the checkpoint is checked and before anything is applied;
  // throws to refuse the checkpoint.
  std::function<void(const OptimizerState& whole)> check;
  // Loads the state cut to the pieces into the optimizer and returns its state tensors
  // ("state.<k>.<name>", k indexing `pieces`), which the checkpoint's bytes are then read into.
  std::function<NamedTensors(const OptimizerState& whole)> apply;
};

// load_checkpoint for an optimizer of pieces: from a checkpoint with the whole state in one file
// or sharded at any world size, only the elements of `optimizer.pieces` are read (after the CRC
// check of each file that holds some). Returns the saved step.
int64_t load_checkpoint(const std::string& dir, const NamedTensors& model, const OptimizerPieces& optimizer,
                        amp::GradScaler& scaler, nlohmann::json* extra = nullptr, const CheckpointParts& parts = {});

}  // namespace mixtrain::io
