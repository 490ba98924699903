#pragma once
// Training checkpoints that resume bit for bit. A checkpoint is a directory:
//   model.safetensors      model parameters and buffers by name ("0.weight", ...)
//   optimizer.safetensors  optimizer tensors: "state.<index>.exp_avg", "state.<index>.master_param", ...
//   trainer.json           {"format": "mixtrain-checkpoint", "version": 1, "step", "files" (size and
//                          CRC-32 of both safetensors files), "optimizer" (hyper-parameters and
//                          step counts), "scaler" (GradScaler.state_dict(); absent when saved
//                          without a scaler, as fp32 and bf16 runs are), "rng" (seed and
//                          offset of mixtrain::default_generator()), "extra" (caller's JSON),
//                          and, when saved with them (CheckpointParts), "scheduler" (an
//                          LRScheduler's state_dict()), "data" (a DataLoader's position) and "fp8"
//                          (amp::Fp8Scaling's recipe and update count; its scales and amax
//                          histories are model buffers in model.safetensors)}
// A sharded checkpoint (distributed::save_sharded_checkpoint) has, instead of optimizer.safetensors,
// one optimizer-rank-<r>-of-<n>.safetensors per rank (pieces of the whole model's optimizer
// tensors) and a "sharded" index in trainer.json saying which; load_checkpoint reads both layouts.
//
// Saving writes the three files into "<dir>.mixtrain-tmp", fsyncs them, then swaps that
// directory with <dir> atomically (renameat2 RENAME_EXCHANGE; without it, two renames through
// "<dir>.mixtrain-old", which load_checkpoint falls back to if <dir> is missing). A crash at any
// point leaves the previous checkpoint complete. An existing <dir> that holds anything else than
// a checkpoint's files is not replaced (an Error instead of deleting someone's files).
//
// Loading reads and checks everything first (manifest sizes and CRCs, safetensors structure,
// tensor names, shapes and dtypes against the model, the optimizer's and the scaler's state),
// and only then copies into the model, optimizer, scaler and generator: a bad checkpoint raises
// an Error naming the file and tensor or field, and changes nothing.
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "mixtrain/amp/fp8.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/data/dataloader.h"
#include "mixtrain/io/safetensors.h"
#include "mixtrain/nn/module.h"
#include "mixtrain/optim/lr_scheduler.h"
#include "mixtrain/optim/optimizer.h"

namespace mixtrain::io {

// Optional members of a checkpoint. Each one given to save_checkpoint is stored under its key;
// each one given to load_checkpoint is validated with the rest and then restored, and must be in
// the checkpoint (an Error otherwise: it was saved without it). Checkpoints saved without them
// load as before.
struct CheckpointParts {
  optim::LRScheduler* scheduler = nullptr;  // "scheduler"
  data::DataLoader* data = nullptr;         // "data": the loader's position and sampler settings
  // "fp8": the FP8 recipe and update count; on load the layers' scales and histories are checked
  // (Fp8Scaling::validate_state_dict) before anything is applied.
  amp::Fp8Scaling* fp8 = nullptr;
};

// `model`: named_parameters() followed by named_buffers() of a model (what the nn::Module
// overloads pass), or any named tensors.
void save_checkpoint(const std::string& dir, const NamedTensors& model, const optim::Optimizer& optimizer,
                     const amp::GradScaler& scaler, int64_t step, const nlohmann::json& extra,
                     const CheckpointParts& parts = {});
// Without `extra` (saved as an empty object). An overload rather than a default argument, so that
// this header needs only <nlohmann/json_fwd.hpp>.
void save_checkpoint(const std::string& dir, const NamedTensors& model, const optim::Optimizer& optimizer,
                     const amp::GradScaler& scaler, int64_t step);
// Returns the saved step. `extra`, when given, receives the saved "extra" JSON (e.g. a
// scheduler's state_dict()).
int64_t load_checkpoint(const std::string& dir, const NamedTensors& model, optim::Optimizer& optimizer,
                        amp::GradScaler& scaler, nlohmann::json* extra = nullptr, const CheckpointParts& parts = {});

// Whether `dir` holds a checkpoint to load (or the fallback copy of an interrupted save): a
// trainer restarted after a failure resumes from its save directory when it does.
bool checkpoint_exists(const std::string& dir);

// Throws Error naming `dir` unless save_checkpoint could write there: `dir` absent or a directory
// holding only a checkpoint's files, and the nearest existing directory above it taking a new file
// (one is created and removed). For programs that save after a long run: check first.
void check_checkpoint_destination(const std::string& dir);

void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& optimizer,
                     const amp::GradScaler& scaler, int64_t step, const nlohmann::json& extra,
                     const CheckpointParts& parts = {});
void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& optimizer,
                     const amp::GradScaler& scaler, int64_t step);
int64_t load_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer& optimizer,
                        amp::GradScaler& scaler, nlohmann::json* extra = nullptr, const CheckpointParts& parts = {});

// Without a GradScaler: fp32 and bf16 runs have none. The checkpoint then has no "scaler" entry.
// Loading without a scaler ignores a saved one (as a part that was saved but not asked for);
// loading with one a checkpoint saved without one is an Error, and changes nothing.
void save_checkpoint(const std::string& dir, const NamedTensors& model, const optim::Optimizer& optimizer, int64_t step,
                     const nlohmann::json& extra, const CheckpointParts& parts = {});
void save_checkpoint(const std::string& dir, const NamedTensors& model, const optim::Optimizer& optimizer, int64_t step);
int64_t load_checkpoint(const std::string& dir, const NamedTensors& model, optim::Optimizer& optimizer,
                        nlohmann::json* extra = nullptr, const CheckpointParts& parts = {});
void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& optimizer, int64_t step,
                     const nlohmann::json& extra, const CheckpointParts& parts = {});
void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& optimizer, int64_t step);
int64_t load_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer& optimizer,
                        nlohmann::json* extra = nullptr, const CheckpointParts& parts = {});

}  // namespace mixtrain::io
